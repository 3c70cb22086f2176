"""PostgreSQL's waiting flag on partitions (db/postgres/0026_partitions_waiting_flag.sql):
the partial index of waiting partitions reads the flag, not the count, so the counts'
updates on every enqueue, claim and ack are HOT. Under a held snapshot none of a row's
versions can be removed; with non-HOT updates each one also left an index entry that a
lookup of the row walked, one heap visit each."""

from __future__ import annotations

import psycopg
import pytest
from conftest import hold_snapshot, pg_available

from headgate import Client, Envelope, Store
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
