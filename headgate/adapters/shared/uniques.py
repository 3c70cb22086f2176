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
from .queries import load

Q = load(__name__)
PRUNE = Q["prune"]
COUNTS = Q["counts"]
SELECT_STATE = Q["select_state"]
SCAN_START = Q["scan_start"]
SCAN_AFTER = Q["scan_after"]
DELETE_ORPHAN = Q["delete_orphan"]
RESTORE = Q["restore"]
SAVE_STATE = Q["save_state"]


def prune_expired(conn: Connection, now: int, limit: int) -> int:
    return int(conn.execute(PRUNE, (now, limit, now)).rowcount)


def counts(conn: Connection, now: int) -> dict[str, int]:
    rows, expired = conn.execute(COUNTS, (now,)).fetchone()
    return {"rows": int(rows), "expired": int(expired)}


SWEEP = "uniques_orphans"


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
