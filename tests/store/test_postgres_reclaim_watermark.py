"""The reclaimer reads the lease index from a watermark (the last complete pass's clock,
less a margin) instead of from its start. Under a held snapshot the start holds an entry
for every job claimed since the snapshot began, each a dead version whose lease passed;
a scan from the watermark does not walk them."""

from __future__ import annotations

import psycopg
import pytest
from support import hold_snapshot, pg_available

from headgate import Client, Store
from headgate.adapters.shared.lifecycle import SELECT_EXPIRED
from headgate.core import Outcome
from headgate.core.job import AckRequest

pytestmark = pytest.mark.skipif(not pg_available(), reason="needs HG_TEST_PG")

Q = "leases"


def scan_buffers(conn: psycopg.Connection, since: int, now: int) -> int:
    sql = SELECT_EXPIRED.format(skip_locked=" FOR UPDATE SKIP LOCKED").replace("?", "%s")
    conn.execute("SET enable_seqscan = off")
    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql,
                        (since, now, 1000)).fetchone()[0]  # type: ignore[index]
    conn.rollback()
    top = plan[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


def test_a_pass_from_the_watermark_skips_the_leases_claimed_before_it(
    pg_store: Store, pg_url: str
) -> None:
    client = Client(pg_store)
    with psycopg.connect(pg_url) as holder, psycopg.connect(pg_url) as conn:
        hold_snapshot(holder)
        claims: list = []
        for i in range(1500):  # one-millisecond leases: each entry's lease has passed
            client.enqueue(kind="work", payload=b"%d" % i, queue=Q)
            _, claims = pg_store.ack_and_admit(
                [AckRequest(c, Outcome.SUCCESS) for c in claims], "w", [Q], 1, lease_ms=1)
        watermark = pg_store.now_ms()
        for claim in claims:
            pg_store.ack(claim, Outcome.SUCCESS)
        now = pg_store.now_ms() + 1
        from_start = scan_buffers(conn, 0, now)
        from_watermark = scan_buffers(conn, watermark, now)
        holder.rollback()
    assert from_watermark * 10 < from_start, (from_watermark, from_start)
    assert pg_store.reclaim_expired() == 0  # every claim was acked
