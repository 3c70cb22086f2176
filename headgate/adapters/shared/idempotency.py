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

from headgate.core.records import IdempotencyRecord

from .queries import fill, load

DAY_MS = 24 * 3_600_000
# An in-progress row older than this belongs to a request that died mid-way.
STALE_MS = 60_000
PURGE_BATCH = 100
# One begin in this many (per process) also purges: PURGE_BATCH / PURGE_EVERY expired keys
# a request (6) keep up with the one key a request adds, and the others save a statement
# inside the write transaction, where every statement is a wait for the GIL.
PURGE_EVERY = 16
_begins = itertools.count()

Q = load(__name__)
SELECT_KEY = Q["select_key"]
UPSERT_IN_PROGRESS = Q["upsert_in_progress"]
PURGE = Q["purge"]
KEY_LOCK = Q["key_lock"]
PURGE_AND_LOCK = fill(Q["purge_and_lock"], purge=PURGE, key_lock=KEY_LOCK)
UPSERT_DONE = Q["upsert_done"]
COMPLETE = Q["complete"]
ABORT = Q["abort"]
FORGET = Q["forget"]


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


def begin(conn: Any, now: int, scope_key: str, request_hash: str, ttl_ms: int,
          stale_ms: int = STALE_MS) -> IdempotencyRecord | None:
    """None: the caller owns the key and must complete or abort it. Otherwise the
    existing record: `state` done (with status/headers/body) or in_progress."""
    record = peek(conn, now, scope_key, stale_ms)
    if record is None:
        conn.execute(UPSERT_IN_PROGRESS, (scope_key, request_hash, now, now + ttl_ms))
    return record


def peek(conn: Any, now: int, scope_key: str,
         stale_ms: int = STALE_MS) -> IdempotencyRecord | None:
    """`begin` without the claim, for a caller that stores its answer in this same
    transaction (`store_done`): the key's lock is held until the commit."""
    purge_and_lock(conn, now, scope_key)
    row = conn.execute(
        SELECT_KEY.format(for_update=conn.dialect.for_update), (scope_key,)
    ).fetchone()
    return live_record(row, now, stale_ms)


def live_record(row: Any, now: int, stale_ms: int = STALE_MS) -> IdempotencyRecord | None:
    """SELECT_KEY's row as the record a request must answer from, or None when there is
    none, it expired, or it is an in-progress row of a request that died."""
    if row is None:
        return None
    request, state, status, headers, body, created, expires = row
    if expires <= now or (state == "in_progress" and created <= now - stale_ms):
        return None
    return record(request, state, status, headers, body)


def record(request_hash: str, state: str, status: int | None, headers: str | None,
           body: bytes | None) -> IdempotencyRecord:
    """A live record's columns as the request answers from them."""
    return IdempotencyRecord(request_hash, state, status,
                             json.loads(headers) if headers else {},
                             bytes(body) if body is not None else b"")


def store_done(conn: Any, now: int, scope_key: str, request_hash: str, ttl_ms: int,
               status: int, headers: dict[str, str], body: bytes) -> None:
    conn.execute(UPSERT_DONE, (scope_key, request_hash, status, json.dumps(headers), body,
                               now, now + ttl_ms))


def complete(conn: Any, scope_key: str, status: int, headers: dict[str, str],
             body: bytes) -> None:
    conn.execute(COMPLETE, (status, json.dumps(headers), body, scope_key))


def abort(conn: Any, scope_key: str) -> None:
    conn.execute(ABORT, (scope_key,))


def forget(conn: Any, scope_key: str) -> None:
    """Drop a key its own transaction claimed, whatever it recorded since."""
    conn.execute(FORGET, (scope_key,))
