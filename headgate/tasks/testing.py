"""``with app.testing() as t:`` — run an app's tasks in the test's own process.

Inside the block the app works on a throw-away SQLite store (a file in a temporary
directory, deleted at the end), so ``task.enqueue(...)`` there, also for an app given
an http(s):// server URL (nothing reaches the server). ``t.run_all()`` runs a
real ``Worker`` on it (handler threads, the app's middleware, real admission: rate
classes, concurrency ceilings, fairness, paused queues) until nothing is left that may
run now — every job is finished, waiting for a later time (a retry's backoff, a
delay), or held back by a policy (a paused rate class keeps its jobs ``available``).
``t.jobs(state=...)`` lists the jobs; ``t.store`` is the store, for setting policies.

Time moves only when the test says so. ``t.advance(seconds=...)`` moves the session's
clock forward: the store's clock (an offset on this throw-away store, not a fake of
it) and the app's, where a call's ``delay_ms`` starts. So a retry's backoff and a
delay are computed from, and come due on, the same moved clock; the next
``t.run_all()`` runs what came due. ``t.run_all(fast_forward=True)`` does that by
itself: whenever nothing may run now but jobs wait for a later time, it moves the clock
to the earliest of them, until none waits. Periodic schedules due on the session's
clock fire at the start of each ``run_all`` (their ``on_missed`` applies, so a tick
advanced far past is ``skip``ped by default); ``fast_forward`` never moves the clock
for a schedule, which would never end.

::

    with app.testing() as t:
        t.store.upsert_rate_class("smtp", limit=1, window_ms=1_000, paused=True)
        ref = send_email.enqueue("a@example.com", subject="hi")
        t.run_all()
        assert [j.id for j in t.jobs(state="available")] == [ref.id]

    with app.testing() as t:
        ref = flaky.enqueue()       # fails once; its retry waits an hour
        t.run_all()
        t.advance(hours=1)
        t.run_all()
        assert ref.result(timeout=5) == "ok"
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from headgate.adapters.sqlite.store import SqliteStore
from headgate.core import InvalidInput, Job, JobFilter, State
from headgate.services.client import Client
from headgate.services.http_client import HttpClient
from headgate.services.scheduling import fire_due_schedules
from headgate.store import open_store
from headgate.store.port import Store
from headgate.worker import Worker


class SessionApp(Protocol):
    """What a session needs of its app (`App` is one): its producer, its queues and
    schedules, and a way to swap its store for the session's."""

    clock_offset_ms: int

    @property
    def client(self) -> Client | HttpClient: ...

    def queues(self) -> list[str]: ...

    def register(self, worker: Worker) -> None: ...

    def sync_schedules(self, store: Store | None = None) -> dict[str, list[str]]: ...

    def swap_store(self, store: Store) -> Callable[[], None]: ...


class TestSession:
    __test__ = False  # not a pytest test class

    def __init__(self, app: SessionApp, *, concurrency: int = 4) -> None:
        self.app = app
        self.concurrency = concurrency
        self._dir: str | None = None
        self._store: Store | None = None
        self._restore: Callable[[], None] | None = None

    @property
    def store(self) -> Store:
        return self._sqlite()

    def _sqlite(self) -> SqliteStore:
        if self._store is None:
            raise RuntimeError("use app.testing() as a context manager")
        assert isinstance(self._store, SqliteStore)
        return self._store

    def __enter__(self) -> TestSession:
        self._dir = tempfile.mkdtemp(prefix="headgate-testing-")
        self._store = open_store(f"sqlite:///{Path(self._dir) / 'jobs.db'}")
        self._restore = self.app.swap_store(self._store)
        self.app.sync_schedules(self._store)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._restore is not None:
            self._restore()
        if self._store is not None:
            self._store.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._store = self._dir = None
        self._restore = None

    # -- time ---------------------------------------------------------------------------
    def now_ms(self) -> int:
        """The session's now (epoch ms): the wall clock plus every ``advance`` so far.
        An absolute ``scheduled_at_ms`` in a session counts from this."""
        return self._sqlite().now_ms()

    def advance(self, *, ms: int = 0, seconds: float = 0, minutes: float = 0,
                hours: float = 0, days: float = 0) -> int:
        """Move the session's clock forward by the sum of the amounts given (forward
        only: leases, retention and the store's order all assume time does not go
        back). Jobs whose backoff or delay has passed are due at the next ``run_all``.
        Returns the new ``now_ms()``."""
        total = 0.0
        for name, value, scale in (("ms", ms, 1), ("seconds", seconds, 1_000),
                                   ("minutes", minutes, 60_000),
                                   ("hours", hours, 3_600_000), ("days", days, 86_400_000)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 \
                    or value != value or value == float("inf"):
                raise InvalidInput(f"advance({name}=...) must be a finite number >= 0")
            total += value * scale
        self._shift(round(total))
        return self.now_ms()

    def _shift(self, step_ms: int) -> None:
        db = self._sqlite().db
        db.clock_offset_ms += step_ms
        self.app.clock_offset_ms = db.clock_offset_ms

    # -- running --------------------------------------------------------------------------
    def run_all(self, timeout: float = 30.0, *, fast_forward: bool = False) -> None:
        """Run jobs until none may run now; TimeoutError if that takes over ``timeout``
        s (of real time). ``fast_forward``: then, while jobs wait for a later time (a
        backoff, a delay, a ``scheduled_at_ms``), move the session's clock to the
        earliest of them and run again, until none waits."""
        store = self._sqlite()
        client = self.app.client
        assert isinstance(client, Client)  # the session took any http(s):// producer away
        fire_due_schedules(store, client=client)
        queues = sorted(set(self.app.queues()) | {q.queue for q in store.queue_stats()})
        worker = Worker(store, queues=queues or ["default"], concurrency=self.concurrency,
                        worker_id="headgate-testing", poll_floor_ms=1, poll_ceiling_ms=10,
                        heartbeat_ms=200, drain_ms=1_000)
        self.app.register(worker)
        worker.start()
        try:
            deadline = time.monotonic() + timeout
            while True:
                while not self._idle(worker):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"jobs still running after {timeout} s")
                if not fast_forward:
                    return
                due = self._next_due_ms(store)
                if due is None:
                    return
                self._shift(max(0, due - store.now_ms()))
        finally:
            worker.stop(timeout=timeout)

    def _next_due_ms(self, store: Store) -> int | None:
        """When the earliest job waiting for a later time comes due, if any does. Due
        ones are promoted first, in every queue (admission promotes only the queues it
        admits, so a paused queue's would look like waiting ones, and the clock would
        stand still)."""
        while store.promote_due() >= 1000:
            pass
        waiting = [j.scheduled_at_ms for s in (State.SCHEDULED, State.RETRYABLE)
                   for j in self.jobs(state=s)]
        return min(waiting, default=None)

    @staticmethod
    def _idle(worker: Worker, polls: int = 3) -> bool:
        """Idle once ``polls`` admissions in a row, with nothing in flight, admitted
        nothing: the store's own answer that no job may run now (due retries and
        delays included: admission promotes them first)."""
        start, empty = worker.polls, worker.empty_polls
        while worker.polls - start < polls:
            if worker.inflight or worker.empty_polls - empty != worker.polls - start:
                time.sleep(0.002)
                return False
            time.sleep(0.002)
        return worker.inflight == 0 and worker.empty_polls - empty == worker.polls - start

    def jobs(self, state: str | State | None = None, kind: str | None = None) -> list[Job]:
        """Every job (optionally of one state and kind), oldest first."""
        value = state.value if isinstance(state, State) else state
        jobs: list[Job] = []
        cursor: str | None = None
        while True:
            page = self.store.list_jobs(JobFilter(state=value, kind=kind), cursor=cursor,
                                        limit=200)
            jobs.extend(page.jobs)
            if page.next_cursor is None:
                return sorted(jobs, key=lambda j: (j.enqueued_at_ms, j.id))
            cursor = page.next_cursor


__all__ = ["TestSession"]
