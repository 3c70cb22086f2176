"""PostgreSQL's waiting flag on partitions (db/postgres/0026_partitions_waiting_flag.sql):
the partial index of waiting partitions reads the flag, not the count, so the counts'
updates on every enqueue, claim and ack are HOT. Under a held snapshot none of a row's
versions can be removed; with non-HOT updates each one also left an index entry that a
lookup of the row walked, one heap visit each."""

from __future__ import annotations

import psycopg
import pytest
from support import hold_snapshot, pg_available, tenants_came_and_went

from headgate import Client, Envelope, Store
from headgate.adapters.postgres.dialect import PostgresDialect
from headgate.adapters.shared import queue_admin
from headgate.core import Outcome
from headgate.core.job import AckRequest

pytestmark = pytest.mark.skipif(not pg_available(), reason="needs HG_TEST_PG")

Q = "flagged"



def entries_walked(conn: psycopg.Connection, key: str = "") -> int:
    """Index entries one lookup of the partition row walks: the heap fetches of an
    index-only scan of its primary key (no page is all-visible while the snapshot is
    held, so each entry is checked against the heap)."""
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET enable_bitmapscan = off")
    sql = "SELECT partition_key FROM partitions WHERE queue = %s AND partition_key = %s"
    plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql,
                        (Q, key)).fetchone()[0]  # type: ignore[index]
    conn.rollback()
    top = plan[0]["Plan"]
    assert top["Node Type"] == "Index Only Scan", top
    return int(top["Heap Fetches"])


def flags(url: str) -> dict[str, tuple[int, bool]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT partition_key, waiting, has_waiting FROM partitions "
                            "WHERE queue = %s", (Q,)).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_under_a_held_snapshot_the_partition_row_stays_cheap_to_find(
    pg_store: Store, pg_url: str
) -> None:
    """A thousand jobs enqueued, claimed and acked one at a time leave ~2,000 versions
    of the partition row that vacuum may not remove. With HOT updates the index has an
    entry per heap page of them (a chain on each); with the count in the partial
    index's predicate it had one per version, and every lookup and upsert of the row
    checked each against the heap (2,002 for these 1,000 jobs)."""
    client = Client(pg_store)
    client.enqueue(kind="work", payload=b"first", queue=Q)
    with psycopg.connect(pg_url) as holder, psycopg.connect(pg_url) as conn:
        hold_snapshot(holder)
        before = entries_walked(conn)
        _, claims = pg_store.ack_and_admit([], "w", [Q], 1)
        for i in range(1000):
            client.enqueue(kind="work", payload=b"%d" % i, queue=Q)
            _, claims = pg_store.ack_and_admit(
                [AckRequest(c, Outcome.SUCCESS) for c in claims], "w", [Q], 1)
            assert len(claims) == 1
        after = entries_walked(conn)
        holder.rollback()
    assert after <= before + 100, (before, after)


def test_settling_clears_the_flags_of_emptied_partitions_only(
    pg_store: Store, pg_url: str
) -> None:
    client = Client(pg_store)
    for key in ("a", "b"):
        client.enqueue_many([Envelope(kind="k", payload=key.encode() + b"%d" % i, queue=Q,
                                      partition_key=key) for i in range(2)])
    while True:  # a drained, b still waiting
        claims = [c for c in pg_store.admit("w", [Q], capacity=1)]
        assert claims
        pg_store.ack(claims[0], Outcome.SUCCESS)
        if flags(pg_url)["a"][0] == 0:
            break
    # a's flag outlives its jobs until settled: the counts' updates left it alone.
    assert flags(pg_url)["a"] == (0, True)
    assert pg_store.settle_partitions(100) == 1
    assert flags(pg_url)["a"] == (0, False)
    assert flags(pg_url)["b"][1] is True
    client.enqueue(kind="k", payload=b"again", queue=Q, partition_key="a")
    assert flags(pg_url)["a"] == (1, True)


def plan_nodes(plan: dict) -> list[dict]:
    return [plan, *(n for child in plan.get("Plans", []) for n in plan_nodes(child))]


def test_the_queue_figures_find_waiting_partitions_through_their_index(
    pg_store: Store, pg_url: str
) -> None:
    """Store.queue_extras (GET /queues, the console's overview) counts a queue's waiting
    partitions and looks for the one holding most. Asked by the count alone, PostgreSQL
    could not use the index of waiting partitions, whose predicate is the flag, and read
    every partition of the queue on every poll: thousands for a queue of tenants."""
    client = Client(pg_store)
    tenants_came_and_went(pg_store, Q, 2000)
    while pg_store.settle_partitions(1000) == 1000:
        pass
    for key in ("t00001", "t01000", "t01000", "t01000", "t01999"):
        client.enqueue(kind="work", payload=b"", queue=Q, partition_key=key)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE partitions_gen")
        extras = pg_store.queue_extras()[Q]
        # Three waiting partitions, one holding more than half: the noisy-partition read.
        assert extras.noisy_partitions == 1 and extras.quiet_exact is False
        waiting = PostgresDialect.waiting_partition
        for sql, params in ((queue_admin.WAITING_PARTITIONS, (Q, 1000)),
                            (queue_admin.PARTITION_HOLDING, (Q, 3))):
            stmt = sql.format(waiting=waiting).replace("?", "%s")
            plan = conn.execute("EXPLAIN (FORMAT JSON) " + stmt, params).fetchone()[0]
            used = {n.get("Index Name") for n in plan_nodes(plan[0]["Plan"])
                    if n.get("Relation Name") == "partitions_gen"}
            assert used == {"partitions_gen_waiting"}, (sql, plan)
