"""PostgreSQL's one-call enqueue (headgate/db/postgres/0006_enqueue_function.sql): what the shared
store tests do not reach — batches mixing replayed and new ids, columns sent once for a
whole batch, refusals inside a caller's transaction, the wake-up NOTIFY on the wire, the
arrival history, and producers beside a worker on the same queue."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql
from support import jobs_index_reads, pg_available

from headgate import (
    Backpressure,
    Client,
    Envelope,
    IdConflict,
    Quarantined,
    State,
    Store,
    open_store,
)
from headgate.adapters.postgres.notify import CHANNEL, decode
from headgate.core import AckRequest

pytestmark = pytest.mark.skipif(not pg_available(), reason="HG_TEST_PG not set")


@pytest.fixture
def store(pg_store: Store) -> Store:
    return pg_store  # this module's tests are PostgreSQL's alone


@pytest.fixture
def listener(pg_url: str) -> Iterator[psycopg.Connection]:
    conn = psycopg.connect(pg_url, autocommit=True)
    conn.execute(f"LISTEN {CHANNEL}")
    yield conn
    conn.close()


def heard_until(listener: psycopg.Connection, marker: str) -> list[str]:
    """Payloads received up to the one naming `marker` (a queue a final enqueue used),
    so "nothing before the marker" needs no waiting for silence."""
    payloads: list[str] = []
    for note in listener.notifies(timeout=10):
        payloads.append(note.payload)
        if marker in decode(note.payload)[1]:
            return payloads
    raise AssertionError(f"no notification for {marker!r}; heard {payloads}")


def test_replayed_ids_are_skipped_and_new_ones_inserted_in_batch_order(store: Store) -> None:
    client = Client(store)
    first = client.enqueue("k", b"a", id="job-a", queue="mix")
    enqueued_at = store.get_job(first).enqueued_at_ms  # type: ignore[union-attr]
    ids = client.enqueue_many([
        Envelope(kind="k", payload=b"n1", id="job-n1", queue="mix"),
        Envelope(kind="k", payload=b"a", id="job-a", queue="mix"),
        Envelope(kind="k", payload=b"n2", queue="mix"),
    ])
    assert ids[:2] == ["job-n1", "job-a"]
    assert store.counts("mix")["available"] == 3
    assert store.get_job("job-a").enqueued_at_ms == enqueued_at  # type: ignore[union-attr]
    claims = store.admit("w", ["mix"], 10)
    assert [c.job.id for c in claims] == ["job-a", "job-n1", ids[2]]
    # Replaying only known ids inserts nothing and is still a success.
    assert client.enqueue_many([Envelope(kind="k", payload=b"a", id="job-a", queue="mix")]) \
        == ["job-a"]


def test_a_conflict_after_replayed_ids_writes_nothing(store: Store) -> None:
    client = Client(store)
    client.enqueue("k", b"a", id="job-a", tags=["x"], headers={"h": "1", "i": "2"})
    client.enqueue("k", b"b", id="job-b", headers={"h": "1"})
    with pytest.raises(IdConflict) as info:
        client.enqueue_many([
            Envelope(kind="k", payload=b"a", id="job-a", tags=["x"],
                     headers={"i": "2", "h": "1"}),  # header order is not content
            Envelope(kind="k", payload=b"new"),
            Envelope(kind="k", payload=b"b", id="job-b", headers={"h": "2"}),
        ])
    assert info.value.job_id == "job-b"
    assert sum(store.counts().values()) == 2


def test_every_column_round_trips_whether_it_varies_or_not(store: Store) -> None:
    now = store.now_ms()
    envs = [
        Envelope(kind="same", payload=b"p0", queue="cols", priority=5, partition_key="t1",
                 rate_class="", weight=2, max_attempts=3, retention_ms=None,
                 tags=["b", "a"], headers={"z": "1", "a": "2"}, sticky_worker="s"),
        Envelope(kind="same", payload=b"p1", queue="cols", priority=-1, partition_key="t2",
                 rate_class="", weight=2, max_attempts=3, retention_ms=5_000,
                 scheduled_at_ms=now + 3_600_000),
        Envelope(kind="same", payload=b"p2", queue="cols", priority=0, partition_key="t1",
                 rate_class="", weight=2, max_attempts=3, pending=True,
                 periodic_schedule_id="sched", periodic_tick_ms=now),
    ]
    ids = Client(store).enqueue_many(envs)
    jobs = [store.get_job(i, include_payload=True) for i in ids]
    assert [j.payload for j in jobs] == [b"p0", b"p1", b"p2"]  # type: ignore[union-attr]
    assert [j.state for j in jobs] == [  # type: ignore[union-attr]
        State.AVAILABLE, State.SCHEDULED, State.PENDING]
    assert [j.priority for j in jobs] == [5, -1, 0]  # type: ignore[union-attr]
    assert [j.partition_key for j in jobs] == ["t1", "t2", "t1"]  # type: ignore[union-attr]
    assert {(j.kind, j.weight, j.max_attempts) for j in jobs} == {  # type: ignore[union-attr]
        ("same", 2, 3)}
    assert [j.retention_ms for j in jobs] == [  # type: ignore[union-attr]
        24 * 3_600_000, 5_000, 24 * 3_600_000]
    assert jobs[0].tags == ("a", "b") and jobs[1].tags == ()  # type: ignore[union-attr]
    assert jobs[0].headers == {"z": "1", "a": "2"} and jobs[2].headers == {}  # type: ignore[union-attr]
    assert [j.sticky_worker for j in jobs] == ["s", "", ""]  # type: ignore[union-attr]
    assert jobs[1].scheduled_at_ms == now + 3_600_000  # type: ignore[union-attr]
    assert jobs[0].scheduled_at_ms == jobs[0].enqueued_at_ms  # type: ignore[union-attr]
    assert (jobs[2].periodic_schedule_id, jobs[2].periodic_tick_ms) == (  # type: ignore[union-attr]
        "sched", now)
    assert jobs[2].pending and not jobs[0].pending  # type: ignore[union-attr]
    partitions = {p.partition_key: p.waiting for p in store.partitions("cols")}
    assert partitions == {"t1": 1}


def test_refusals_leave_the_callers_transaction_usable(
    pg_url: str, store: Store, quarantine: Callable[[Store, str, bytes], str]
) -> None:
    client = Client(store)
    quarantine(store, "poison", b"pill")
    client.enqueue("k", b"a", id="job-a", queue="tx")
    store.set_enqueue_limit("full", 0)
    with psycopg.connect(pg_url) as conn:
        kept = client.enqueue("k", b"kept", queue="tx", conn=conn)
        with pytest.raises(Quarantined):
            client.enqueue("poison", b"pill", queue="tx", conn=conn)
        with pytest.raises(Backpressure) as info:
            client.enqueue("k", b"x", queue="full", conn=conn)
        assert (info.value.queue, info.value.limit, info.value.incoming) == ("full", 0, 1)
        with pytest.raises(IdConflict):
            client.enqueue("k", b"other", id="job-a", queue="tx", conn=conn)
        also = client.enqueue("k", b"also kept", queue="tx", conn=conn)
        conn.commit()
    assert store.counts("tx")["available"] == 3
    assert store.get_job(kept) is not None and store.get_job(also) is not None
    assert sum(store.counts("full").values()) == 0


def test_the_wake_up_is_sent_by_the_enqueue_and_only_when_it_commits(
    pg_url: str, store: Store, listener: psycopg.Connection
) -> None:
    client = Client(store)
    client.enqueue_many([Envelope(kind="k", payload=b"1", queue="b-queue"),
                         Envelope(kind="k", payload=b"2", queue="a-queue"),
                         Envelope(kind="k", payload=b"3", queue="b-queue")])
    assert heard_until(listener, "a-queue") == [f"{store.origin}|a-queue\x1fb-queue"]  # type: ignore[attr-defined]

    client.enqueue("k", b"r", id="job-r", queue="refused")
    assert heard_until(listener, "refused") == [f"{store.origin}|refused"]  # type: ignore[attr-defined]
    with pytest.raises(IdConflict):
        client.enqueue("k", b"different", id="job-r", queue="refused")
    client.enqueue("k", b"r", id="job-r", queue="refused")  # a replay inserts nothing
    with psycopg.connect(pg_url) as conn:
        client.enqueue("k", b"rolled back", queue="refused", conn=conn)
        conn.rollback()
    client.enqueue("k", b"u", queue="unique", unique_key=b"u")  # the shared path
    assert heard_until(listener, "unique") == [f"{store.origin}|unique"]  # type: ignore[attr-defined]

    polling = open_store(pg_url, notify=False)
    try:
        Client(polling).enqueue("k", b"quiet", queue="refused")
    finally:
        polling.close()
    client.enqueue("k", b"m", queue="marker")
    assert heard_until(listener, "marker") == [f"{store.origin}|marker"]  # type: ignore[attr-defined]


def test_arrivals_are_counted_in_the_queue_history(pg_url: str, store: Store) -> None:
    client = Client(store)
    client.enqueue_many([Envelope(kind="k", payload=b"%d" % i, queue="hist") for i in range(3)])
    client.enqueue("k", b"single", queue="hist")
    client.enqueue("k", b"single", id="job-h", queue="hist")
    client.enqueue("k", b"single", id="job-h", queue="hist")  # a replay did not arrive
    with psycopg.connect(pg_url) as conn:
        (arrived,) = conn.execute(
            "SELECT sum(arrived) FROM queue_history WHERE queue = 'hist'").fetchone()
    assert arrived == 5


def test_an_enqueue_reads_jobs_through_the_primary_key_alone(pg_url: str) -> None:
    """The function's generic plans are made on its session's first call, here on an
    empty table; a plan that joined the id array with jobs then scanned a whole index
    of jobs on every later enqueue (O(jobs) per call). The scan counters of the one
    session show which indexes the enqueues read."""
    store = open_store(pg_url, pool_max=1)
    try:
        client = Client(store)
        client.enqueue("k", b"first", queue="scans")
        client.enqueue_many([Envelope(kind="k", payload=b"%d" % i, queue="scans")
                             for i in range(200)])
        for i in range(20):
            client.enqueue("k", b"%d" % i, queue="scans")
        client.enqueue("k", b"again", id="job-scans", queue="scans")
        client.enqueue("k", b"again", id="job-scans", queue="scans")  # a replay
        read = jobs_index_reads(store)
    finally:
        store.close()
    assert read.pop("jobs_pkey") >= 1  # the replay found its job
    assert read and all(n == 0 for n in read.values()), read


def test_a_single_job_skips_the_function_unless_it_needs_a_decision(pg_url: str) -> None:
    """One job on an existing, unlimited queue is one plain statement; a first job on a
    new queue, a replayed id, a quarantined fingerprint and a limited queue go through
    headgate_enqueue_v3. The function's call counter (track_functions) tells which ran."""
    database = sql.Identifier(pg_url.rsplit("/", 1)[1])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} SET track_functions = 'pl'").format(database))
    store = open_store(pg_url, pool_max=1)

    def calls() -> int:
        with store.db.read() as conn:  # type: ignore[attr-defined]
            conn.execute("SELECT pg_stat_force_next_flush()")
            row = conn.execute("SELECT calls FROM pg_stat_user_functions "
                               "WHERE funcname = 'headgate_enqueue_v3'").fetchone()
        return 0 if row is None else int(row[0])

    try:
        client = Client(store)
        client.enqueue("k", b"first", queue="plain")  # a new queue: the function
        assert calls() == 1
        for i in range(5):
            client.enqueue("k", b"%d" % i, queue="plain")
        client.enqueue("k", b"mine", id="job-plain", queue="plain")
        assert calls() == 1
        client.enqueue("k", b"mine", id="job-plain", queue="plain")  # a replay
        assert calls() == 2
        with pytest.raises(IdConflict):
            client.enqueue("k", b"other", id="job-plain", queue="plain")
        assert calls() == 3
        store.set_enqueue_limit("plain", 7)
        with pytest.raises(Backpressure):
            client.enqueue("k", b"over", queue="plain")
        assert calls() == 4
        assert store.counts("plain")[State.AVAILABLE.value] == 7
    finally:
        store.close()


def test_producers_and_a_worker_share_a_queue_without_deadlock(pg_url: str) -> None:
    """Enqueues and acks+admits both update the queue's counter and partition rows; they
    must take them in one order (a deadlock surfaces as StoreUnavailable)."""
    n, producers = 150, 2
    stores = [open_store(pg_url) for _ in range(producers + 1)]
    worker_store = stores[-1]
    errors: list[BaseException] = []

    def produce(store: Store, offset: int) -> None:
        try:
            client = Client(store)
            for i in range(n):
                client.enqueue("k", b"%d" % (offset + i), queue="busy",
                               partition_key=f"p{i % 3}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(s, k * n))
               for k, s in enumerate(stores[:producers])]
    try:
        for t in threads:
            t.start()
        done, held = 0, []
        while done < n * producers and not errors:
            acks = [AckRequest(c, "success") for c in held]
            _, held = worker_store.ack_and_admit(acks, "w", ["busy"], 5)
            done += len(acks)
        for t in threads:
            t.join()
        assert errors == []
        assert worker_store.counts("busy")["completed"] == n * producers
    finally:
        for t in threads:
            t.join()
        for s in stores:
            s.close()


def test_a_replace_never_rewrites_a_holder_an_admit_is_starting(pg_url: str,
                                                                store: Store) -> None:
    """Unique keys are not tied to a queue, so the queue lock of a conflicting enqueue
    does not order it against an admit of the holder's queue; the holder's row lock
    does. The admit commits first here: the replace must then see a running holder."""
    from headgate import Duplicate
    from headgate.adapters.postgres import admission
    from headgate.adapters.postgres.connection import PgConnection

    client = Client(store)
    holder = client.enqueue("k", b"original", queue="qa", unique_key=b"u", priority=1)
    outcome: list[object] = []

    def conflicting_enqueue() -> None:
        try:
            client.enqueue("k", b"REPLACED", queue="qb", unique_key=b"u",
                           unique_replace=15, priority=9)
        except Duplicate as exc:
            outcome.append(exc)

    with psycopg.connect(pg_url) as raw:  # one transaction, committed below
        _, claims = admission.admit(PgConnection(raw), "w", ["qa"], 1, 30_000, None)
        assert [c.job.id for c in claims] == [holder]
        producer = threading.Thread(target=conflicting_enqueue)
        producer.start()
        producer.join(0.5)  # it reaches the holder's row and waits for this admit
        raw.commit()
    producer.join(10)
    (dup,) = outcome
    assert isinstance(dup, Duplicate) and dup.existing_id == holder and not dup.replaced
    job = store.get_job(holder, include_payload=True)
    assert job is not None and job.state is State.RUNNING
    assert (job.payload, job.priority) == (b"original", 1)
