"""Stored responses for the control API's Idempotency-Key (docs/api.md).

A request first *begins* its key (an in-progress row, so a concurrent duplicate is told
to wait rather than acting twice), then either *completes* it with the response to
replay or *aborts* it so a retry runs again. Rows live in the database, so a replay
works after a restart and from any serve process on the same database.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

DAY_MS = 24 * 3_600_000
# An in-progress row older than this belongs to a request that died mid-way.
STALE_MS = 60_000
PURGE_BATCH = 100
# One begin in this many (per process) also purges: PURGE_BATCH / PURGE_EVERY expired keys
# a request (6) keep up with the one key a request adds, and the others save a statement
# inside the write transaction, where every statement is a wait for the GIL.
PURGE_EVERY = 16
_begins = itertools.count()

SELECT_KEY = (
    "SELECT request_hash, state, status, headers, body, created_at_ms, expires_at_ms "
    "FROM api_idempotency WHERE scope_key = ?{for_update}"
)
UPSERT_IN_PROGRESS = (
    "INSERT INTO api_idempotency (scope_key, request_hash, state, status, headers, body, "
    "created_at_ms, expires_at_ms) VALUES (?, ?, 'in_progress', NULL, NULL, NULL, ?, ?) "
    "ON CONFLICT (scope_key) DO UPDATE SET request_hash = excluded.request_hash, "
    "state = 'in_progress', status = NULL, headers = NULL, body = NULL, "
    "created_at_ms = excluded.created_at_ms, expires_at_ms = excluded.expires_at_ms"
)


# A bounded number of expired keys (an expired key is never answered: `peek` reads the
# expiry).
PURGE = (
    "DELETE FROM api_idempotency WHERE scope_key IN (SELECT scope_key FROM "
    "api_idempotency WHERE expires_at_ms <= ? LIMIT ?)"
)
# PostgreSQL: the key's lock (a missing row cannot be locked); with the purge, one round
# trip. What the key's holder committed is read by the next statement, whose snapshot is
# taken after the lock.
KEY_LOCK = ("SELECT pg_advisory_xact_lock(hashtextextended(encode(?, 'hex'), "
            "headgate_key_lock_seed()))")
PURGE_AND_LOCK = (
    f"WITH purged AS ({PURGE} RETURNING 1) {KEY_LOCK}, (SELECT count(*) FROM purged)"
)


def purge_due() -> bool:
    """Whether this claim of a key is the one in PURGE_EVERY that also purges."""
    return next(_begins) % PURGE_EVERY == 0


def purge_and_lock(conn: Any, now: int, scope_key: str) -> None:
    """The key's lock (PostgreSQL; SQLite's one writer needs none), and on one call in
    PURGE_EVERY the purge."""
    purge = purge_due()
    if not conn.dialect.serial_writes:
        if purge:
            conn.execute(PURGE_AND_LOCK, (now, PURGE_BATCH, scope_key.encode()))
        else:
            conn.execute(KEY_LOCK, (scope_key.encode(),))
    elif purge:
        conn.execute(PURGE, (now, PURGE_BATCH))


# A stored answer replaces an expired or abandoned record of the key.
INSERT_DONE = (
    "INSERT INTO api_idempotency (scope_key, request_hash, state, status, headers, body, "
    "created_at_ms, expires_at_ms) "
)
ON_CONFLICT_DONE = (
    " ON CONFLICT (scope_key) DO UPDATE SET request_hash = excluded.request_hash, "
    "state = 'done', status = excluded.status, headers = excluded.headers, "
    "body = excluded.body, created_at_ms = excluded.created_at_ms, "
    "expires_at_ms = excluded.expires_at_ms"
)
UPSERT_DONE = INSERT_DONE + "VALUES (?, ?, 'done', ?, ?, ?, ?, ?)" + ON_CONFLICT_DONE


def begin(conn: Any, now: int, scope_key: str, request_hash: str, ttl_ms: int,
          stale_ms: int = STALE_MS) -> dict[str, Any] | None:
    """None: the caller owns the key and must complete or abort it. Otherwise the
    existing record: `state` done (with status/headers/body) or in_progress."""
    record = peek(conn, now, scope_key, stale_ms)
    if record is None:
        conn.execute(UPSERT_IN_PROGRESS, (scope_key, request_hash, now, now + ttl_ms))
    return record


def peek(conn: Any, now: int, scope_key: str, stale_ms: int = STALE_MS) -> dict[str, Any] | None:
    """`begin` without the claim, for a caller that stores its answer in this same
    transaction (`store_done`): the key's lock is held until the commit."""
    purge_and_lock(conn, now, scope_key)
    row = conn.execute(
        SELECT_KEY.format(for_update=conn.dialect.for_update), (scope_key,)
    ).fetchone()
    return live_record(row, now, stale_ms)


def live_record(row: Any, now: int, stale_ms: int = STALE_MS) -> dict[str, Any] | None:
    """SELECT_KEY's row as the record a request must answer from, or None when there is
    none, it expired, or it is an in-progress row of a request that died."""
    if row is None:
        return None
    request, state, status, headers, body, created, expires = row
    if expires <= now or (state == "in_progress" and created <= now - stale_ms):
        return None
    return record(request, state, status, headers, body)


def record(request_hash: str, state: str, status: int | None, headers: str | None,
           body: bytes | None) -> dict[str, Any]:
    """A live record's columns as the request answers from them."""
    return {
        "request_hash": request_hash,
        "state": state,
        "status": status,
        "headers": json.loads(headers) if headers else {},
        "body": bytes(body) if body is not None else b"",
    }


def store_done(conn: Any, now: int, scope_key: str, request_hash: str, ttl_ms: int,
               status: int, headers: dict[str, str], body: bytes) -> None:
    conn.execute(UPSERT_DONE, (scope_key, request_hash, status, json.dumps(headers), body,
                               now, now + ttl_ms))


def complete(conn: Any, scope_key: str, status: int, headers: dict[str, str],
             body: bytes) -> None:
    conn.execute(
        "UPDATE api_idempotency SET state = 'done', status = ?, headers = ?, body = ? "
        "WHERE scope_key = ?", (status, json.dumps(headers), body, scope_key),
    )


def abort(conn: Any, scope_key: str) -> None:
    conn.execute(
        "DELETE FROM api_idempotency WHERE scope_key = ? AND state = 'in_progress'",
        (scope_key,),
    )


def forget(conn: Any, scope_key: str) -> None:
    """Drop a key its own transaction claimed, whatever it recorded since."""
    conn.execute("DELETE FROM api_idempotency WHERE scope_key = ?", (scope_key,))
