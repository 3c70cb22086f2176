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
from .queries import load

Q = load(__name__)
# In the order prune_older deletes from them.
PRUNE = {
    "queue_history": Q["prune_queue_history"],
    "queue_latency": Q["prune_queue_latency"],
    "rate_class_history": Q["prune_rate_class_history"],
}
# The tables hold at most the horizon's worth of buckets once the duty runs, and the
# counts go by the `bucket_ms` index.
COUNTS = {
    "queue_history": Q["count_queue_history"],
    "queue_latency": Q["count_queue_latency"],
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
