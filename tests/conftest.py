"""Shared fixtures: a real store per backend, on a fresh database per test.

`store_url` is parametrized by backend; `store` and `client` build on it, so every
test that asks for any of them runs once per backend, all three pointing at the same
database. SQLite gets a file in the test's tmp dir. PostgreSQL gets a freshly created
database (from the server named by `HG_TEST_PG`) that is dropped afterwards; it is
skipped until `headgate.adapters.postgres` exists, so the PostgreSQL adapter plugs in
without any test changing. A test that gets its database migrated before its body runs
(it asks for one of support.MIGRATED_BEFORE_BODY) gets a copy of a database this session
migrated; any other test gets an empty one, as a test of migrating itself needs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from support import fresh_pg_database, pg_available, pg_template

import headgate
from headgate import Client, Store, open_store

# The PostgreSQL store's LISTEN threads (headgate/adapters/postgres/notify.py): one a
# test leaves running outlives the test's database and retries its connection for the
# rest of the run ("... listen connection lost ... does not exist" in the log).
LISTEN_THREADS = frozenset({"headgate-listen", "headgate-finished"})
# How long a LISTEN thread a test leaves behind may take to end: a closed store's thread
# stuck connecting ends after the connect timeout (5 s). Spent only when one is left.
LISTEN_THREAD_GRACE_S = 7.0
# The threads an app starts when first needed and keeps until it is shut down: the
# console's live hub and its sockets' readers (headgate/dashboard/live.py), the API's
# event broadcaster (headgate/services/live.py). One a test leaves running goes on
# reading (or waiting on) the test's store, closed or dropped by then, for the rest of
# the run.
LIVE_THREADS = frozenset({"headgate-live", "headgate-live-reader", "headgate-sse"})
# How long such a thread may take to end: a socket's reader notices its socket closed
# within live.READ_POLL_S (0.5 s), the hub its last socket gone within a frame (0.25 s).
# Spent only when one is left.
LIVE_THREAD_GRACE_S = 3.0


def _threads(names: frozenset[str]) -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name in names and t.is_alive()}


def _still_running(left: set[threading.Thread], grace_s: float) -> list[str]:
    """The names of the threads of `left` still running after `grace_s` (shared)."""
    deadline = time.monotonic() + grace_s
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    return sorted(t.name for t in left if t.is_alive())


def _none_left(names: frozenset[str], grace_s: float, what: str, advice: str
               ) -> Iterator[None]:
    """Fails the test if threads named `names` that it started are still running
    `grace_s` after it."""
    before = _threads(names)
    yield
    left = _threads(names) - before
    alive = _still_running(left, grace_s) if left else []
    if alive:
        pytest.fail(f"the test left {what} running ({', '.join(alive)}): {advice}",
                    pytrace=False)


@pytest.fixture(autouse=True)
def _no_listen_thread_left() -> Iterator[None]:
    """Fails a test that leaves a LISTEN thread it started running: a store it opened
    (itself, or through an App, a client or a server it made) was never closed. Set up
    before, so torn down after, the test's other function-scoped fixtures."""
    yield from _none_left(LISTEN_THREADS, LISTEN_THREAD_GRACE_S, "PostgreSQL LISTEN threads",
                          "close the store it opened (or the App/client/server that opened it)")


@pytest.fixture(autouse=True)
def _no_live_thread_left() -> Iterator[None]:
    """Fails a test that leaves a live-update thread it started running: an app it built
    (or a LiveHub) started one, for a live socket or an event stream, and was never shut
    down. Set up before, so torn down after, the test's other function-scoped fixtures."""
    yield from _none_left(LIVE_THREADS, LIVE_THREAD_GRACE_S, "live-update threads",
                          "shut the app down (support.stop_app, or support.serving for a "
                          "served one; LiveHub.stop for a hub of its own)")


@pytest.fixture(scope="session", name="pg_template")
def pg_template_fixture() -> Iterator[str]:
    """This process's migrated template database (support.pg_template), made when a
    test first needs it."""
    yield from pg_template()


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh PostgreSQL database for a PostgreSQL-only test (its module skips
    without HG_TEST_PG)."""
    yield from fresh_pg_database(request)


@pytest.fixture(params=["sqlite", "pg"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A URL naming a fresh database of the parametrized backend: empty, or on
    PostgreSQL migrated already when the test's is before its body (fresh_pg_database)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/hg.db"
        return
    if not pg_available():
        pytest.skip("postgres adapter not available")
    yield from fresh_pg_database(request)


@pytest.fixture
def backend(store_url: str) -> str:
    return "sqlite" if store_url.startswith("sqlite:") else "pg"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """The store on `store_url`, migrated."""
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    """A store on a fresh PostgreSQL database, migrated (the PostgreSQL-only tests')."""
    s = open_store(pg_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def open_more(store_url: str) -> Iterator[Callable[[], Store]]:
    """Opens extra stores on the same database (another process's view of it)."""
    opened: list[Store] = []

    def _open() -> Store:
        s = open_store(store_url, migrate=False)
        opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()


@pytest.fixture
def client(store: Store) -> Client:
    return headgate.Client(store)


# -- helpers shared by the store tests (fixtures, so no test imports conftest) --------

def _all_jobs(store: Store, queue: str | None = None) -> list[headgate.Job]:
    """Every job, by paging the public listing (the test's own recount)."""
    jobs: list[headgate.Job] = []
    cursor: str | None = None
    while True:
        page = store.list_jobs(headgate.JobFilter(queue=queue), cursor=cursor, limit=200)
        jobs.extend(page.jobs)
        if page.next_cursor is None:
            return jobs
        cursor = page.next_cursor


@pytest.fixture
def all_jobs() -> Callable[..., list[headgate.Job]]:
    return _all_jobs


def lose_lease(store: Store, job_id: str, queue: str, worker: str = "crasher") -> headgate.Job:
    """Admit `job_id` (alone in `queue`) on a 30 ms lease, let it expire and reclaim it:
    one real lost lease. A retryable job is made due again at once so the next crash
    need not wait out the reclaim backoff."""
    claims = store.admit(worker, [queue], capacity=1, lease_ms=30)
    assert [c.job.id for c in claims] == [job_id]
    deadline = claims[0].lease_expires_at_ms
    while store.now_ms() <= deadline:
        time.sleep(0.01)
    assert store.reclaim_expired() == 1
    job = store.get_job(job_id)
    assert job is not None
    if job.state is headgate.State.RETRYABLE:
        store.reschedule_job(job_id, 0)
    return job


@pytest.fixture
def crash() -> Callable[..., headgate.Job]:
    return lose_lease


def quarantine_fingerprint(store: Store, kind: str, payload: bytes) -> str:
    """Get (kind, payload)'s fingerprint quarantined the real way: a job with it loses
    its lease three times. The crasher lives in its own queue, `crash-<fp>`."""
    fp = headgate.fingerprint(kind, payload)
    queue = f"crash-{fp[:8]}"
    job_id = headgate.Client(store).enqueue(kind, payload, queue=queue)
    for _ in range(3):
        job = lose_lease(store, job_id, queue)
    assert job.state is headgate.State.QUARANTINED
    return fp


@pytest.fixture
def quarantine() -> Callable[[Store, str, bytes], str]:
    return quarantine_fingerprint
