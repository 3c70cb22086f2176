"""Reading the job latency histograms (table `queue_latency`, migration 0014).

The store writes them itself, in triggers on `jobs` (SQLite: row triggers like its
counters; PostgreSQL: one grouped upsert per statement, functions/latency.sql), so the
figures are the fleet's whatever process admitted or acked. `wait` is available ->
running, `run` is running -> terminal; each row is one histogram bucket of one minute
of one queue and kind (kind since migration 0022; '' for buckets written before it).
"""

from __future__ import annotations

from .conn import Connection
from .queries import fill, load

Q = load(__name__)
SELECT_SINCE = Q["select_since"]
TOTALS_SINCE = Q["totals_since"]


def rows_since(conn: Connection, since_ms: int) -> list[tuple[str, int, str, int, int, int]]:
    return [(str(q), int(b), str(m), int(le), int(n), int(s))
            for q, b, m, le, n, s in conn.execute(SELECT_SINCE, (since_ms,)).fetchall()]


def totals_since(conn: Connection, since_ms: int, queue: str | None,
                 kind: str | None) -> list[tuple[str, str, str, int, int, int]]:
    """(queue, kind, metric, le_ms, n, sum_ms) summed over the minutes from `since_ms`,
    of one queue (a range of the key), one kind (the bucket index) or both."""
    where = ""
    params: list[object] = [since_ms]
    if queue is not None:
        where += " AND queue = ?"
        params.append(queue)
    if kind is not None:
        where += " AND kind = ?"
        params.append(kind)
    sql = fill(TOTALS_SINCE, where=where)
    return [(str(q), str(k), str(m), int(le), int(n), int(s))
            for q, k, m, le, n, s in conn.execute(sql, params).fetchall()]
