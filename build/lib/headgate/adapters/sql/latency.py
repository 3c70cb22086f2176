"""Reading the job latency histograms (table `queue_latency`, migration 0014).

The store writes them itself, in triggers on `jobs` (SQLite: row triggers like its
counters; PostgreSQL: one grouped upsert per statement, functions/latency.sql), so the
figures are the fleet's whatever process admitted or acked. `wait` is available ->
running, `run` is running -> terminal; each row is one histogram bucket of one minute.
"""

from __future__ import annotations

from .conn import Connection

SELECT_SINCE = ("SELECT queue, bucket_ms, metric, le_ms, n, sum_ms FROM queue_latency "
                "WHERE bucket_ms >= ?")


def rows_since(conn: Connection, since_ms: int) -> list[tuple[str, int, str, int, int, int]]:
    return [(str(q), int(b), str(m), int(le), int(n), int(s))
            for q, b, m, le, n, s in conn.execute(SELECT_SINCE, (since_ms,)).fetchall()]
