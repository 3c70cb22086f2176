"""PostgreSQL: what threads of one process enqueue at the same moment goes to the server
as one call. `POST /api/v1/jobs` requests (`KeyedBatcher`,
`headgate_enqueue_keyed_many_v1`) are each still decided and answered on their own, and
a batch whose call fails is sent again one request at a time. Single jobs
(`EnqueueBatcher`) share a call when none has a unique key; a refused batch goes again
job by job.

The batches are made for certain, not by timing: the first call waits for a queue lock
another connection holds, so the others queue behind it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from support import pg_available, pg_statements_sent

from headgate import Backpressure, Envelope, IdConflict, Store, open_store
from headgate.adapters.postgres import keyed
from headgate.adapters.postgres.connection import translate
from headgate.adapters.shared import idempotency
from headgate.core.records import IdempotencyRecord

pytestmark = pytest.mark.skipif(not pg_available(), reason="HG_TEST_PG not set")

ANSWER = (201, {"Content-Type": "application/json"}, b'{"id": "x"}')
KEY_LOCK = translate(idempotency.KEY_LOCK)
LOCK_QUEUE = "SELECT headgate_lock_queue_v1(%s)"


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    store = open_store(pg_url, pool_max=1)
    for queue in ("q", "q1", "q2", "full"):  # the queue rows
        store.enqueue_many([Envelope(kind="k", payload=b"warm", queue=queue)])
    yield store
    store.close()


def _env(key: str, queue: str = "q1") -> Envelope:
    return Envelope(kind="k", payload=b"p", queue=queue, unique_key=key.encode()).validated()


def _request(key: str, queue: str = "q1") -> keyed.KeyedRequest:
    return keyed.KeyedRequest(key, "h", _env(key, queue), ANSWER, None, 60_000)


def run_threads_until(calls: list[Callable[[], Any]],
                      steps: list[Callable[[], Any]]) -> list[Any]:
    """The first call on a thread, then `steps[0]`; the other calls on threads of
    their own, then the remaining steps; what each call returned or raised."""
    out: list[Any] = [None] * len(calls)

    def one(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - returned for the test to assert on
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    threads[0].start()
    steps[0]()
    for t in threads[1:]:
        t.start()
    for step in steps[1:]:
        step()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a request never returned"
    return out


def _waiting_on_advisory(watcher: psycopg.Connection, but: int, n: int = 1) -> None:
    deadline = time.monotonic() + 10
    while watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory' "
            "AND pid <> %s AND datname = current_database()", (but,)).fetchone()[0] < n:
        assert time.monotonic() < deadline, "no backend waited for the lock"
        time.sleep(0.01)


def _queued(store: Store, n: int, batcher: str = "_keyed") -> None:
    deadline = time.monotonic() + 10
    while len(getattr(store, batcher)._waiting) < n:
        assert time.monotonic() < deadline, "the requests never queued"
        time.sleep(0.005)


def test_a_batch_answers_each_request_on_its_own(store: Store, pg_url: str) -> None:
    store.set_enqueue_limit("full", 1)  # its warm-up job fills it
    requests = [_request("b", "q2"), _request("a", "q1"), _request("a", "q1"),
                _request("f", "full")]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = keyed.call_many(conn, requests)
    first, second = keyed.decided(requests[1].env, rows[1]), keyed.decided(
        requests[2].env, rows[2])
    other = keyed.decided(requests[0].env, rows[0])
    # Answers by position, whatever order the batch ran in (sorted by queue).
    assert not isinstance(other, IdempotencyRecord) and other.ids == [requests[0].env.id]
    assert not isinstance(first, IdempotencyRecord) and first.ids == [requests[1].env.id]
    # The same key twice: the second finds the record the first stored in the batch.
    assert isinstance(second, IdempotencyRecord)
    assert (second.state, second.status, second.body) == ("done", 201, ANSWER[2])
    with pytest.raises(Backpressure):
        keyed.decided(requests[3].env, rows[3])
    assert store.get_job(requests[0].env.id) is not None
    assert store.get_job(requests[2].env.id) is None
    assert store.get_job(requests[3].env.id) is None
    with psycopg.connect(pg_url, autocommit=True) as conn:
        stored = conn.execute("SELECT scope_key FROM api_idempotency ORDER BY 1").fetchall()
    assert stored == [("a",), ("b",)]  # a refusal stores no answer


def test_requests_that_queue_behind_a_call_share_the_next(store: Store, pg_url: str) -> None:
    keys = ["first", "k1", "k2", "k3"]
    out: list[Any] = []
    holder = psycopg.connect(pg_url)
    watcher = psycopg.connect(pg_url, autocommit=True)

    def run() -> None:
        holder.execute(LOCK_QUEUE, ("q1",))
        calls = [lambda k=k: store.enqueue_keyed(k, "h", _env(k), ANSWER) for k in keys]
        out.extend(run_threads_until(calls, [
            lambda: _waiting_on_advisory(watcher, holder.info.backend_pid),
            lambda: _queued(store, 3),
            holder.commit]))

    try:
        sent = pg_statements_sent(store, run)
    finally:
        holder.close()
        watcher.close()
    assert all(not isinstance(r, BaseException) for r in out), out
    assert [len(r.ids) for r in out] == [1, 1, 1, 1]
    assert sent == 2  # the first request's call, then one for the three behind it
    assert all(store.get_job(r.ids[0]) is not None for r in out)
    replays = [store.enqueue_keyed(k, "h", _env(k), ANSWER) for k in keys]
    assert all(r.record is not None and r.record.status == 201 for r in replays)


def test_a_batch_that_deadlocks_is_sent_again_request_by_request(store: Store,
                                                                  pg_url: str) -> None:
    """Another session holds the second request's key and then asks for the queue lock
    the batch took for the first: PostgreSQL aborts the batch (the other session waits
    longer before it checks for deadlock), and each request then goes alone."""
    out: list[Any] = []
    holder = psycopg.connect(pg_url)
    other = psycopg.connect(pg_url)
    watcher = psycopg.connect(pg_url, autocommit=True)
    other.execute("SET deadlock_timeout = '30s'")
    other.execute(KEY_LOCK, (b"zz",))
    deadlocks = _deadlocks(watcher)

    def close_the_circle() -> None:
        _waiting_on_advisory(watcher, holder.info.backend_pid, 1)
        other.execute(LOCK_QUEUE, ("q1",))  # waits until the batch is aborted
        other.commit()

    try:
        holder.execute(LOCK_QUEUE, ("q",))
        calls = [lambda: store.enqueue_keyed("blocker", "h", _env("blocker", "q"), ANSWER),
                 lambda: store.enqueue_keyed("aa", "h", _env("aa"), ANSWER),
                 lambda: store.enqueue_keyed("zz", "h", _env("zz"), ANSWER)]
        out.extend(run_threads_until(calls, [
            lambda: _waiting_on_advisory(watcher, holder.info.backend_pid),
            lambda: _queued(store, 2),
            holder.commit,
            close_the_circle]))
    finally:
        holder.close()
        other.close()
    assert all(not isinstance(r, BaseException) for r in out), out
    assert [len(r.ids) for r in out] == [1, 1, 1]
    assert all(store.get_job(r.ids[0]) is not None for r in out)
    # A backend flushes its statistics at most once a second, and one that went idle
    # within that second only after 10 s more (PostgreSQL 15's idle interval): under
    # load the deadlock's count arrived after this test had stopped waiting at 10 s.
    deadline = time.monotonic() + 25
    while _deadlocks(watcher) == deadlocks:
        assert time.monotonic() < deadline, "no deadlock was detected"
        time.sleep(0.1)
    watcher.close()


def _deadlocks(conn: psycopg.Connection) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(conn.execute("SELECT deadlocks FROM pg_stat_database "
                            "WHERE datname = current_database()").fetchone()[0])


def test_single_jobs_enqueued_meanwhile_share_the_next_call(store: Store,
                                                           pg_url: str) -> None:
    """The first job waits for its queue's lock; of the three behind it, the two without
    a unique key share one call, the keyed one goes alone; and one whose id is taken
    makes its batch go again job by job, the others enqueued."""
    taken = store.enqueue_many([Envelope(kind="k", payload=b"x", queue="q2")])[0]
    envs = [Envelope(kind="k", payload=b"1", queue="q1"),
            Envelope(kind="k", payload=b"2", queue="q1"),
            Envelope(kind="k", payload=b"3", queue="q2"),
            Envelope(kind="k", payload=b"4", queue="q1", unique_key=b"u")]
    clash = [Envelope(kind="k", payload=b"5", queue="q2"),
             Envelope(kind="k", payload=b"6", queue="q2", id=taken)]
    out: list[Any] = []
    holder = psycopg.connect(pg_url)
    watcher = psycopg.connect(pg_url, autocommit=True)

    def run(batch: list[Envelope], behind: int) -> None:
        holder.execute(LOCK_QUEUE, ("q1",))
        blocker = [lambda: store.enqueue_many([Envelope(kind="k", payload=b"0", queue="q1")])]
        calls = blocker + [lambda e=e: store.enqueue_many([e]) for e in batch]
        out.extend(run_threads_until(calls, [
            lambda: _waiting_on_advisory(watcher, holder.info.backend_pid),
            lambda: _queued(store, behind, "_single"),
            holder.commit]))

    try:
        sent = pg_statements_sent(store, lambda: run(envs, 4))
        run(clash, 2)
    finally:
        holder.close()
        watcher.close()
    # The blocker alone, then the three plain jobs as one call, then the keyed job.
    assert sent == 3
    assert all(isinstance(r, list) and len(r) == 1 for r in out[:5]), out
    assert isinstance(out[7], IdConflict), out
    assert isinstance(out[6], list)
    ids = [r[0] for r in out if isinstance(r, list)]
    assert len(set(ids)) == len(ids) == 7
    assert all(store.get_job(i) is not None for i in ids)
