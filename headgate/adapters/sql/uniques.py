"""The `uniques` table's upkeep: window keys whose window has passed are deleted.

A key with `expires_at_ms` holds only until then (enqueue.py `_claim_unique` overwrites
an expired one), so once expired the row is dead weight, and throttle-style keys (a new
key per window) would otherwise pile up forever. Lifecycle keys (`expires_at_ms` NULL)
are left alone: whether they hold depends on their job.
"""

from __future__ import annotations

from .conn import Connection

# The outer `expires_at_ms <= ?` is checked again on the row as it is deleted: on
# PostgreSQL an enqueue may have re-claimed the key (a new window) since the inner
# select read it, and that fresh row must survive.
PRUNE = """
DELETE FROM uniques WHERE key IN (
    SELECT key FROM uniques WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?
    ORDER BY expires_at_ms LIMIT ?
) AND expires_at_ms <= ?
"""
COUNTS = """
SELECT (SELECT count(*) FROM uniques),
       (SELECT count(*) FROM uniques WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?)
"""


def prune_expired(conn: Connection, now: int, limit: int) -> int:
    return int(conn.execute(PRUNE, (now, limit, now)).rowcount)


def counts(conn: Connection, now: int) -> dict[str, int]:
    rows, expired = conn.execute(COUNTS, (now,)).fetchone()
    return {"rows": int(rows), "expired": int(expired)}
