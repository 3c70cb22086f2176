"""PostgreSQL's counter rows keyed by generation (db/postgres/0027_counter_generations.sql):
queue_counts and partitions are views of the current generation, the counters duty
starts a new one every few seconds, and every writer of counts holds the counters lock
shared, so a roll never loses or doubles a count. Under a held snapshot a lookup then
walks the versions of one generation, not every version since the snapshot began."""

from __future__ import annotations

import threading

import psycopg
import pytest
from support import hold_snapshot, pg_available, tenants_came_and_went

from headgate import Client, Envelope, Store
from headgate.core import Outcome
from headgate.core.job import AckRequest

pytestmark = pytest.mark.skipif(not pg_available(), reason="needs HG_TEST_PG")

Q = "generations"


def lookup_buffers(conn: psycopg.Connection) -> int:
    """Buffers one lookup of the queue's 'completed' count reads (the view's row of the
    current generation: the generation row, the index, the heap)."""
    sql = "SELECT n FROM queue_counts WHERE queue = %s AND state = 'completed'"
    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql,
                        (Q,)).fetchone()[0]  # type: ignore[index]
    conn.rollback()
    top = plan[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


def run_jobs(store: Store, client: Client, n: int, roll_every: int = 0) -> None:
    """`n` jobs enqueued, claimed and acked one at a time: a few updates of the queue's
    counter rows each."""
    _, claims = store.ack_and_admit([], "w", [Q], 1)
    for i in range(n):
        client.enqueue(kind="work", payload=b"%d" % i, queue=Q)
        _, claims = store.ack_and_admit(
            [AckRequest(c, Outcome.SUCCESS) for c in claims], "w", [Q], 1)
        if roll_every and i % roll_every == 0:
            assert store.roll_counters()
    for claim in claims:
        store.ack(claim, Outcome.SUCCESS)


def test_under_a_held_snapshot_a_count_lookup_walks_one_generation(
    pg_store: Store, pg_url: str
) -> None:
    client = Client(pg_store)
    with psycopg.connect(pg_url) as holder, psycopg.connect(pg_url) as conn:
        hold_snapshot(holder)
        run_jobs(pg_store, client, 1000)
        grown = lookup_buffers(conn)  # every version since the snapshot began
        run_jobs(pg_store, client, 600, roll_every=50)
        bounded = lookup_buffers(conn)
        holder.rollback()
    assert pg_store.counts(Q)["completed"] == 1600
    assert bounded * 4 < grown, (bounded, grown)


def actual_counts(url: str) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    with psycopg.connect(url) as conn:
        states = dict(conn.execute(
            "SELECT state, count(*) FROM jobs WHERE queue = %s GROUP BY state",
            (Q,)).fetchall())
        parts = {key: (waiting, running) for key, waiting, running in conn.execute(
            "SELECT partition_key, count(*) FILTER (WHERE state = 'available'), "
            "count(*) FILTER (WHERE state = 'running') FROM jobs WHERE queue = %s "
            "GROUP BY partition_key", (Q,)).fetchall()}
    return states, parts


def test_counts_stay_exact_while_generations_roll_under_concurrent_work(
    pg_store: Store, pg_url: str
) -> None:
    """A producer and a worker on their own threads (their own connections) while a
    third rolls the counters as fast as it can: every count ends where the jobs say."""
    client = Client(pg_store)
    total = 600
    done = threading.Event()
    errors: list[BaseException] = []
    rolls = [0]

    def produce() -> None:
        for start in range(0, total, 6):
            client.enqueue_many([Envelope(kind="k", payload=b"%d" % i, queue=Q,
                                          partition_key="abc"[i % 3])
                                 for i in range(start, start + 6)])

    def work() -> None:
        completed = 0
        claims: list = []
        while completed < total:
            acks = [AckRequest(c, Outcome.SUCCESS) for c in claims]
            _, claims = pg_store.ack_and_admit(acks, "w", [Q], 4)
            completed += len(acks)

    def roll() -> None:
        while not done.is_set():
            rolls[0] += pg_store.roll_counters(wait_ms=200)

    def guarded(fn):  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        return run

    roller = threading.Thread(target=guarded(roll))
    roller.start()
    workers = [threading.Thread(target=guarded(f)) for f in (produce, work)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    done.set()
    roller.join(30)
    assert not errors, errors
    assert rolls[0] > 5
    states, parts = actual_counts(pg_url)
    assert states == {"completed": total}
    counts = {state: n for state, n in pg_store.counts(Q).items() if n}
    assert counts == states
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT partition_key, waiting, running FROM partitions "
                            "WHERE queue = %s", (Q,)).fetchall()
    assert {key: (waiting, running) for key, waiting, running in rows} == parts
    assert parts == {key: (0, 0) for key in "abc"}


def generation(url: str) -> int:
    with psycopg.connect(url) as conn:
        return int(conn.execute(
            "SELECT gen FROM counter_generation").fetchone()[0])  # type: ignore[index]


def test_a_transaction_that_may_still_write_counts_makes_the_roll_give_up(
    pg_store: Store, pg_url: str
) -> None:
    """A producer's own open transaction that locked a queue holds the counters lock
    shared: the roll waits its few milliseconds, gives up and changes nothing."""
    before = generation(pg_url)
    with psycopg.connect(pg_url) as producer:
        producer.execute("SELECT headgate_lock_queue_v1(%s)", (Q,))
        assert pg_store.roll_counters(wait_ms=50) is False
        assert generation(pg_url) == before
        producer.commit()
    assert pg_store.roll_counters(wait_ms=50) is True
    assert generation(pg_url) == before + 1


def test_a_repeatable_read_writer_older_than_the_roll_fails_to_serialize(
    pg_store: Store, pg_url: str
) -> None:
    """Its snapshot shows the generation the roll copied and deleted: counting into it
    would lose the counts, so it fails as a serialization failure (retryable)."""
    with psycopg.connect(pg_url) as rr, psycopg.connect(pg_url) as rc:
        hold_snapshot(rr)
        assert pg_store.roll_counters() is True
        with pytest.raises(psycopg.errors.SerializationFailure, match="generation"):
            rr.execute("SELECT headgate_counter_gen_v1()")
        rr.rollback()
        assert rc.execute("SELECT headgate_counter_gen_v1()").fetchone() == (
            generation(pg_url),)


def test_a_roll_carries_only_the_partitions_with_jobs_or_credit(
    pg_store: Store, pg_url: str
) -> None:
    """A queue of many tenants: 500 partitions that each held a job, 3 that hold one now
    and 1 with a job running. The roll copies those 4, not all 504 (it holds every writer
    of counts up while it copies), and a tenant left behind comes back with its next job,
    which admission finds."""
    client = Client(pg_store)
    tenants_came_and_went(pg_store, Q, 500)
    while pg_store.settle_partitions(1000) == 1000:
        pass
    for key in ("busy", "w1", "w2", "w3"):
        client.enqueue(kind="work", payload=key.encode(), queue=Q, partition_key=key)
    # One of them starts running.
    (running,) = pg_store.admit("w", [Q], 1, 60_000)
    before = {p.partition_key: (p.waiting, p.running) for p in pg_store.partitions(Q)}
    assert pg_store.roll_counters()
    with psycopg.connect(pg_url) as conn:
        kept = {r[0] for r in conn.execute(
            "SELECT partition_key FROM partitions WHERE queue = %s", (Q,)).fetchall()}
    assert kept == {"busy", "w1", "w2", "w3"}
    assert {p.partition_key: (p.waiting, p.running) for p in pg_store.partitions(Q)} == before
    assert pg_store.counts(Q)["available"] == 3

    # A tenant left behind: its next job adds its row again, and admission claims it.
    pg_store.ack_many([AckRequest(running, Outcome.SUCCESS)])
    client.enqueue(kind="work", payload=b"back", queue=Q, partition_key="t00042")
    claimed = {c.job.partition_key: c for c in pg_store.admit("w", [Q], 10, 60_000)}
    assert set(claimed) == {"busy", "w1", "w2", "w3", "t00042"} - {running.job.partition_key}
    assert claimed["t00042"].job.payload == b"back"
