"""The statements that find a running job by id (a lease renewal, progress, output, the
plain acks) read it by primary key in their generic plans. Written with
`state = 'running'`, the planner took the partial index jobs_running, which statistics
call tiny, and scanned all of it with the id as a filter: under a held snapshot, where
every claimed job leaves an entry there that vacuum may not remove, one renewal took
92 ms after seven minutes of it (bench/held_snapshot.py)."""

from __future__ import annotations

import re

import psycopg
import pytest
from support import pg_available

from headgate import Client, Envelope, Store
from headgate.adapters.shared import lifecycle

pytestmark = pytest.mark.skipif(not pg_available(), reason="needs HG_TEST_PG")

BY_ID = {
    "renew": lifecycle.RENEW,
    "write_progress": lifecycle.Q["write_progress"],
    "write_output": lifecycle.Q["write_output"],
    "complete_plain": lifecycle.COMPLETE_PLAIN.format(marks="?", rows="(?, ?, ?::bigint)"),
    "delete_plain": lifecycle.DELETE_PLAIN.format(marks="?", rows="(?, ?, ?::bigint)"),
}



def generic_plan(conn: psycopg.Connection, sql: str) -> str:
    n = 0

    def number(_: re.Match[str]) -> str:
        nonlocal n
        n += 1
        return f"${n}"

    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("PREPARE probe AS " + re.sub(r"\?", number, sql))
    rows = conn.execute("EXPLAIN EXECUTE probe(" + ", ".join(["NULL"] * n) + ")").fetchall()
    conn.execute("DEALLOCATE probe")
    return "\n".join(r[0] for r in rows)


def test_a_running_job_is_found_by_its_id(pg_store: Store, pg_url: str) -> None:
    Client(pg_store).enqueue_many([Envelope(kind="k", payload=b"%d" % i, queue="plans")
                                for i in range(2_000)])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE jobs")  # while none runs: jobs_running looks empty
        pg_store.admit("w", ["plans"], capacity=5)
        plans = {name: generic_plan(conn, sql) for name, sql in BY_ID.items()}
    for name, plan in plans.items():
        assert "jobs_running" not in plan, (name, plan)
        assert "jobs_pkey" in plan, (name, plan)
