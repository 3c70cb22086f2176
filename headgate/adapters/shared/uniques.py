"""The `uniques` table's upkeep: window keys whose window has passed are deleted, and
lifecycle keys whose job is gone.

A key with `expires_at_ms` holds only until then (enqueue.py `_claim_unique` overwrites
an expired one), so once expired the row is dead weight, and throttle-style keys (a new
key per window) would otherwise pile up forever. A lifecycle key (`expires_at_ms` NULL)
holds while its job is unfinished; once the job is deleted (retention, an operator,
retention 0 at the ack) nothing would ever remove it. The job deletes do not touch
`uniques` (the ack path stays as it is); a sweep walks the table by key instead, a
bounded batch per call, its position kept in `upkeep` (migration 0015) so that it
continues across duty runs and servers and /system/storage can report it.
"""

from __future__ import annotations

from typing import Any

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


SWEEP = "uniques_orphans"
SELECT_STATE = "SELECT cursor, pruned, passes, pass_at_ms FROM upkeep WHERE name = ?"
# One batch of keys in key order; the third column marks an orphan (PK lookups only).
SCAN_START = """
SELECT key, job_id, CASE WHEN expires_at_ms IS NULL
    AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = uniques.job_id) THEN 1 ELSE 0 END
FROM uniques ORDER BY key LIMIT ?
"""
SCAN_AFTER = """
SELECT key, job_id, CASE WHEN expires_at_ms IS NULL
    AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = uniques.job_id) THEN 1 ELSE 0 END
FROM uniques WHERE key > ? ORDER BY key LIMIT ?
"""
# Re-checked as the row goes: on PostgreSQL an enqueue may have claimed the key for a
# new job since the scan (job_id differs then, so the row stays).
DELETE_ORPHAN = """
DELETE FROM uniques WHERE key = ? AND job_id = ? AND expires_at_ms IS NULL
    AND NOT EXISTS (SELECT 1 FROM jobs WHERE id = ?)
"""
# PostgreSQL: a DELETE that waited for an enqueue re-reading the same job id (an id
# enqueued again after its job was deleted) re-checks the row, not the subquery, so it
# can take the fresh claim. The job is visible to this next statement: put it back.
RESTORE = """
INSERT INTO uniques (key, job_id, expires_at_ms)
SELECT ?, ?, NULL WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ?)
ON CONFLICT (key) DO NOTHING
"""
SAVE_STATE = """
UPDATE upkeep SET cursor = ?, pruned = pruned + ?, passes = passes + ?,
    pass_at_ms = CASE WHEN ? = 1 THEN ? ELSE pass_at_ms END
WHERE name = ?
"""


def sweep_orphans(conn: Connection, now: int, limit: int) -> int:
    """Examine the next `limit` keys after the saved position and delete the lifecycle
    keys among them whose job no longer exists. Returns how many keys were examined:
    fewer than `limit` means the pass reached the end (the next call starts over)."""
    state = conn.execute(SELECT_STATE, (SWEEP,)).fetchone()
    if state is None:
        return 0
    cursor = state[0]
    if cursor is None:
        rows = conn.execute(SCAN_START, (limit,)).fetchall()
    else:
        rows = conn.execute(SCAN_AFTER, (bytes(cursor), limit)).fetchall()
    pruned: list[tuple[bytes, str]] = []
    for key, job_id, orphan in rows:
        if orphan and conn.execute(DELETE_ORPHAN, (key, job_id, job_id)).rowcount:
            pruned.append((bytes(key), str(job_id)))
    if pruned and not conn.dialect.serial_writes:  # type: ignore[attr-defined]
        for key, job_id in pruned:
            conn.execute(RESTORE, (key, job_id, job_id))
    done = len(rows) < limit
    position = None if done or not rows else bytes(rows[-1][0])
    conn.execute(SAVE_STATE, (position, len(pruned), int(done), int(done), now, SWEEP))
    return len(rows)


def orphan_sweep_state(conn: Connection) -> dict[str, Any]:
    state = conn.execute(SELECT_STATE, (SWEEP,)).fetchone()
    if state is None:
        return {"pruned": 0, "passes": 0, "pass_at_ms": None}
    return {"pruned": int(state[1]), "passes": int(state[2]),
            "pass_at_ms": None if state[3] is None else int(state[3])}
