"""Leader/follower batching for short writes of concurrent threads (group commit).

Threads that would each pay a commit for a small write hand their request to a combiner
instead: one of them, the leader, serves every request waiting at that moment as one
batch, then wakes the others with their results. A commit, and on PostgreSQL the locks
an enqueue holds until it, are most of such a write's cost; a batch shares them.

The leader serves one batch, then hands leadership to the oldest waiting thread, so no
request serves others' for longer than one batch. Each engine says how a batch is
served (`Combiner._serve`): SQLite's actions in one transaction with a savepoint each
(headgate/adapters/sqlite/combining.py), PostgreSQL's keyed enqueues as one function
call (headgate/adapters/postgres/keyed.py).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Generic, TypeVar

R = TypeVar("R")
T = TypeVar("T")

# Enough for every request thread of one serve process (16) several times over.
MAX_BATCH = 64


class Slot(Generic[R, T]):
    """One thread's request, and once served its result or its error."""

    __slots__ = ("request", "wake", "result", "error", "lead")

    def __init__(self, request: R) -> None:
        self.request = request
        # Only a thread that waits gets one: a caller that finds nobody leading (every
        # call of a single-threaded producer) serves itself without making an Event.
        self.wake: threading.Event | None = None
        self.result: T | None = None
        self.error: BaseException | None = None
        self.lead = False


class Combiner(ABC, Generic[R, T]):
    """`run(request)` returns what serving it returned, raises what it raised; the
    module says how requests share a batch."""

    def __init__(self, max_batch: int = MAX_BATCH) -> None:
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._waiting: list[Slot[R, T]] = []
        self._leading = False
        self._batch: list[Slot[R, T]] = []

    def run(self, request: R) -> T:
        slot: Slot[R, T] = Slot(request)
        with self._lock:
            self._waiting.append(slot)
            lead = not self._leading
            self._leading = True
            if not lead:
                wake = slot.wake = threading.Event()
        if not lead:
            wake.wait()
            lead = slot.lead  # handed the lead: the next batch, ours in it, is ours to run
        if lead:
            self._lead()
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]

    @abstractmethod
    def _serve(self) -> None:
        """Serve one batch: take it with `_take()` (as late as the engine can, so that
        whoever queued meanwhile joins) and set each slot's result or error. What it
        raises is every slot's error that has none yet."""

    def _take(self) -> list[Slot[R, T]]:
        with self._lock:
            batch = self._waiting[:self.max_batch]
            del self._waiting[:self.max_batch]
        self._batch = batch
        return batch

    def _lead(self) -> None:
        self._batch = []
        try:
            self._serve()
        except BaseException as exc:
            batch = self._batch or self._take()
            for slot in batch:
                if slot.error is None:
                    slot.error, slot.result = exc, None
            if not isinstance(exc, Exception):
                raise
        finally:
            batch, self._batch = self._batch, []
            with self._lock:
                heir = self._waiting[0] if self._waiting else None
                self._leading = heir is not None
            for slot in batch:
                if slot.wake is not None:
                    slot.wake.set()
            if heir is not None:
                heir.lead = True
                assert heir.wake is not None  # it queued behind a leader
                heir.wake.set()
