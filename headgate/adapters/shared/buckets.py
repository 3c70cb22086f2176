"""Ageing out the per-minute buckets (`queue_history`, `queue_latency`).

Both tables gain rows every minute a queue is busy (latency: one per histogram bucket
hit) and nothing else deletes them. The retention duty deletes the buckets older than
its horizon, oldest first, a bounded batch per call, by each table's `bucket_ms` index
(migrations 0014 and 0015). What reads them needs no more than the horizon's minimum:
the console's longest chart is 24 hours, and /metrics folds settled buckets into
running totals a few minutes after they close.
"""

from __future__ import annotations

from typing import Any

from .conn import Connection

# Row values, not rowid/ctid: the same statement on both engines (queue_latency is
# WITHOUT ROWID on SQLite).
PRUNE = {
    "queue_history": """
DELETE FROM queue_history WHERE (queue, bucket_ms) IN (
    SELECT queue, bucket_ms FROM queue_history WHERE bucket_ms < ? ORDER BY bucket_ms LIMIT ?
)""",
    "queue_latency": """
DELETE FROM queue_latency WHERE (queue, bucket_ms, kind, metric, le_ms) IN (
    SELECT queue, bucket_ms, kind, metric, le_ms FROM queue_latency WHERE bucket_ms < ?
    ORDER BY bucket_ms LIMIT ?
)""",
    # An adaptive rate class's limit changes (migration 0024), by the same horizon.
    "rate_class_history": """
DELETE FROM rate_class_history WHERE id IN (
    SELECT id FROM rate_class_history WHERE at_ms < ? ORDER BY at_ms LIMIT ?
)""",
}
# The tables hold at most the horizon's worth of buckets once the duty runs, and the
# counts go by the `bucket_ms` index (the oldest bucket is one index probe).
COUNTS = {
    "queue_history": """
SELECT (SELECT count(*) FROM queue_history),
       (SELECT count(*) FROM queue_history WHERE bucket_ms < ?),
       (SELECT min(bucket_ms) FROM queue_history)""",
    "queue_latency": """
SELECT (SELECT count(*) FROM queue_latency),
       (SELECT count(*) FROM queue_latency WHERE bucket_ms < ?),
       (SELECT min(bucket_ms) FROM queue_latency)""",
}


def prune_older(conn: Connection, cutoff_ms: int, limit: int) -> int:
    """Delete at most `limit` buckets older than `cutoff_ms` in all, history first."""
    total = 0
    for sql in PRUNE.values():
        if total >= limit:
            break
        total += int(conn.execute(sql, (cutoff_ms, limit - total)).rowcount)
    return total


def counts(conn: Connection, cutoff_ms: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for table, sql in COUNTS.items():
        rows, expired, oldest = conn.execute(sql, (cutoff_ms,)).fetchone()
        out[table.removeprefix("queue_")] = {
            "rows": int(rows), "expired": int(expired),
            "oldest_bucket_ms": None if oldest is None else int(oldest),
        }
    return out
