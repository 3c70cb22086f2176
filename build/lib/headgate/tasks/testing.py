"""``with app.testing() as t:`` — run an app's tasks in the test's own process.

Inside the block the app works on a throw-away SQLite store (a file in a temporary
directory, deleted at the end), so ``task.enqueue(...)`` there, also for an app given
an http(s):// server URL (nothing reaches the server). ``t.run_all()`` runs a
real ``Worker`` on it (handler threads, the app's middleware, real admission: rate
classes, concurrency ceilings, fairness, paused queues) until nothing is left that may
run now — every job is finished, waiting for a later time (a retry's backoff, a
delay), or held back by a policy (a paused rate class keeps its jobs ``available``).
``t.jobs(state=...)`` lists the jobs; ``t.store`` is the store, for setting policies.

::

    with app.testing() as t:
        t.store.upsert_rate_class("smtp", limit=1, window_ms=1_000, paused=True)
        ref = send_email.enqueue("a@example.com", subject="hi")
        t.run_all()
        assert [j.id for j in t.jobs(state="available")] == [ref.id]
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headgate.core import Job, JobFilter, State
from headgate.store import open_store
from headgate.store.port import Store
from headgate.worker import Worker

if TYPE_CHECKING:
    from .app import App


class TestSession:
    __test__ = False  # not a pytest test class

    def __init__(self, app: App, *, concurrency: int = 4) -> None:
        self.app = app
        self.concurrency = concurrency
        self._dir: str | None = None
        self._store: Store | None = None
        self._saved: tuple[Any, ...] | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("use app.testing() as a context manager")
        return self._store

    def __enter__(self) -> TestSession:
        self._dir = tempfile.mkdtemp(prefix="headgate-testing-")
        self._store = open_store(f"sqlite:///{Path(self._dir) / 'jobs.db'}")
        app = self.app
        # An http(s):// app enqueues through its server: the session takes that away
        # too, or a test's jobs would go to the real server.
        self._saved = (app._store, app._owns_store, app._client, app._http)
        app._store, app._owns_store, app._client, app._http = self._store, False, None, None
        app.sync_schedules(self._store)
        return self

    def __exit__(self, *exc: object) -> None:
        app = self.app
        if self._saved is not None:
            app._store, app._owns_store, app._client, app._http = self._saved
        if self._store is not None:
            self._store.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._store = self._dir = self._saved = None

    def run_all(self, timeout: float = 30.0) -> None:
        """Run jobs until none may run now; TimeoutError if that takes over ``timeout`` s."""
        store = self.store
        queues = sorted(set(self.app.queues()) | {q["queue"] for q in store.queue_stats()})
        worker = Worker(store, queues=queues or ["default"], concurrency=self.concurrency,
                        worker_id="headgate-testing", poll_floor_ms=1, poll_ceiling_ms=10,
                        heartbeat_ms=200, drain_ms=1_000)
        self.app.register(worker)
        worker.start()
        try:
            deadline = time.monotonic() + timeout
            while not self._idle(worker):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"jobs still running after {timeout} s")
        finally:
            worker.stop(timeout=timeout)

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
