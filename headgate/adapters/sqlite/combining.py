"""Group commit for short write actions of concurrent threads (SQLite's one writer).

Threads that would each open a write transaction for a few statements (an HTTP enqueue
with its Idempotency-Key) hand their action to a combiner instead: one of them, the
leader, runs every action waiting at that moment in ONE transaction and commits once,
then wakes the others with their results. A transaction and a commit are most of such a
write's cost, and the threads no longer queue on the writer lock one commit at a time.

Each action runs inside its own savepoint when it shares the transaction, so an action
that raises undoes only its own writes and its thread gets the exception; the others
commit. A failed commit fails every action of the batch: none of them is acknowledged.
The leader serves one batch, then hands leadership to the oldest waiting thread, so no
request serves others' for longer than one batch.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from headgate.adapters.shared.queries import load

from .connection import Database, unavailable

T = TypeVar("T")

Q = load(__name__)
SAVEPOINT, RELEASE, ROLLBACK_TO = Q["savepoint"], Q["release"], Q["rollback_to"]

# Enough for every request thread of one serve process (16) several times over.
MAX_BATCH = 64


class _Slot(Generic[T]):
    __slots__ = ("action", "wake", "result", "error", "lead")

    def __init__(self, action: Callable[[sqlite3.Connection, int], T]) -> None:
        self.action = action
        self.wake = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None
        self.lead = False


class WriteCombiner:
    """Runs ``action(conn, now)`` in a write transaction it may share with other threads'
    actions (the module says how); returns what the action returned once it committed."""

    def __init__(self, db: Database, max_batch: int = MAX_BATCH) -> None:
        self.db = db
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._waiting: list[_Slot[Any]] = []
        self._leading = False

    def run(self, action: Callable[[sqlite3.Connection, int], T]) -> T:
        slot: _Slot[T] = _Slot(action)
        with self._lock:
            self._waiting.append(slot)
            lead = not self._leading
            self._leading = True
        if not lead:
            slot.wake.wait()
            lead = slot.lead  # handed the lead: the next batch, ours in it, is ours to run
        if lead:
            self._lead()
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]

    def _lead(self) -> None:
        batch: list[_Slot[Any]] = []
        try:
            with self.db.write() as (conn, now):
                # Taken once the writer is ours: whoever queued while we waited joins.
                batch = self._take()
                self._run(conn, now, batch)
        except BaseException as exc:
            batch = batch or self._take()
            for slot in batch:
                if slot.error is None:
                    slot.error, slot.result = exc, None
            if not isinstance(exc, Exception):
                raise
        finally:
            with self._lock:
                heir = self._waiting[0] if self._waiting else None
                self._leading = heir is not None
            for slot in batch:
                slot.wake.set()
            if heir is not None:
                heir.lead = True
                heir.wake.set()

    def _take(self) -> list[_Slot[Any]]:
        with self._lock:
            batch = self._waiting[:self.max_batch]
            del self._waiting[:self.max_batch]
        return batch

    def _run(self, conn: sqlite3.Connection, now: int, batch: list[_Slot[Any]]) -> None:
        shared = len(batch) > 1
        for slot in batch:
            if shared:
                conn.execute(SAVEPOINT)
            try:
                slot.result = slot.action(conn, now)
            except Exception as exc:
                slot.error = unavailable(exc) if isinstance(exc, sqlite3.OperationalError) else exc
                if not shared:
                    raise  # alone: the whole transaction rolls back
                conn.execute(ROLLBACK_TO)
            if shared:
                conn.execute(RELEASE)
