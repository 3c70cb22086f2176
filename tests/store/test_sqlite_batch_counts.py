"""SQLite's batch enqueue writes its counter deltas and arrivals once per batch
(migration 17): the counters and the arrival history must come out exactly as if the
per-row insert triggers had counted, and any other insert (a single enqueue, another
program's INSERT) is still counted, and its arrival recorded, by them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from headgate import Client, Envelope, open_store

RECOUNT_STATES = """
SELECT queue, state, count(*) FROM jobs GROUP BY queue, state ORDER BY 1, 2
"""
RECOUNT_PARTITIONS = """
SELECT queue, partition_key, sum(state = 'available'), sum(state = 'running') FROM jobs
GROUP BY queue, partition_key HAVING sum(state IN ('available', 'running')) > 0
ORDER BY 1, 2
"""


def _counters(path: Path) -> tuple[list[tuple], list[tuple]]:
    with sqlite3.connect(path) as conn:
        states = conn.execute(
            "SELECT queue, state, n FROM queue_counts WHERE n <> 0 ORDER BY 1, 2").fetchall()
        parts = conn.execute(
            "SELECT queue, partition_key, waiting, running FROM partitions "
            "WHERE waiting <> 0 OR running <> 0 ORDER BY 1, 2").fetchall()
    return states, parts


def _recount(path: Path) -> tuple[list[tuple], list[tuple]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(RECOUNT_STATES).fetchall(), conn.execute(RECOUNT_PARTITIONS).fetchall()


def test_a_batch_counts_like_the_row_triggers(tmp_path: Path) -> None:
    path = tmp_path / "hg.db"
    store = open_store(str(path))
    try:
        client = Client(store)
        client.enqueue("k", b"single", queue="qa", partition_key="t1")  # the triggers'
        envs = [Envelope(kind="k", payload=b"%d" % i, queue=("qa", "qb", "qc")[i % 3],
                         partition_key=("", "t1", "t2", "t3")[i % 4],
                         scheduled_at_ms=2**42 if i % 5 == 0 else 0,
                         pending=i % 11 == 0)
                for i in range(1200)]
        client.enqueue_many(envs)
        client.enqueue_many(envs[:5] + [Envelope(kind="k", payload=b"late", queue="qd")])
        claims = store.admit("w", ["qa", "qb"], 7)
        assert len(claims) == 7
        with sqlite3.connect(path) as conn:  # another program's insert: counted = 0
            conn.execute(
                "INSERT INTO jobs (id, kind, schema_version, payload, fingerprint, queue, "
                "priority, partition_key, rate_class, weight, state, scheduled_at_ms, "
                "max_attempts, retention_ms, enqueued_at_ms) VALUES ('zz-outside', 'k', 1, "
                "x'00', 'fp', 'qb', 0, 't9', '', 1, 'available', 0, 25, 1000, 0)")
        states, parts = _counters(path)
        assert (states, parts) == _recount(path)
        assert ("qb", "t9", 1, 0) in parts and ("qd", "available", 1) in states
        assert {s for _, s, _ in states} >= {"available", "scheduled", "pending", "running"}
        with sqlite3.connect(path) as conn:
            arrived = dict(conn.execute(
                "SELECT queue, sum(arrived) FROM queue_history GROUP BY queue").fetchall())
            assert arrived == dict(conn.execute(
                "SELECT queue, count(*) FROM jobs GROUP BY queue").fetchall())
    finally:
        store.close()
