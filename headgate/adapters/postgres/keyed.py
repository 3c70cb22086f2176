"""`POST /api/v1/jobs` on PostgreSQL in one statement (`Store.enqueue_keyed`).

The shared path (`idempotent_write`, then the enqueue on its connection) is seven round
trips, and from the enqueue on, the transaction holds its queue's lock and counter rows
until the commit. Here the key's lock, its record, the enqueue and the answer to replay
are one call of `headgate_enqueue_keyed_v1` (headgate/db/postgres/functions/keyed.sql)
in autocommit: one round trip, committed on the server as the call returns, so nothing
of the client's runs while the queue's lock is held. One statement also spares the
request's thread the driver's work per statement (~100 µs of CPU a statement on a 2-vCPU
machine), which it does holding the GIL every other request of the process needs.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg

from headgate.adapters.shared import idempotency
from headgate.adapters.shared.enqueue_rows import EnqueueResult
from headgate.adapters.shared.queries import fill, load
from headgate.core import Duplicate, Envelope
from headgate.core.records import IdempotencyRecord
from headgate.store.port import Answer

from .connection import PgDatabase
from .enqueue import ONE_ARGS, _row, result

Q = load(__name__)
ENQUEUE_KEYED = fill(Q["enqueue_keyed"], one_args=ONE_ARGS)


def enqueue_keyed(raw: psycopg.Connection, scope_key: str, request_hash: str,
                  env: Envelope, answer: Answer, origin: str | None, ttl_ms: int,
                  ) -> IdempotencyRecord | EnqueueResult:
    """On an autocommit connection: the key's live record (nothing enqueued), or what
    the enqueue did, its answer stored. Typed refusals raise after the commit, which
    then wrote nothing."""
    status, headers, body = answer
    purge = idempotency.PURGE_BATCH if idempotency.purge_due() else 0
    row = raw.execute(ENQUEUE_KEYED, [
        scope_key, request_hash, idempotency.STALE_MS, purge, status, json.dumps(headers),
        body, ttl_ms, *_row(env), origin]).fetchone()
    assert row is not None
    if row[1] is not None:
        return idempotency.record(*row[:5])
    return result([env], row[5:])


def store_replay(db: PgDatabase, scope_key: str, request_hash: str, ttl_ms: int,
                 dup: Duplicate, duplicate_answer: Callable[[Duplicate], Answer | None]
                 ) -> None:
    """The answer to a request whose unique key was held, in a transaction of its own
    (rare: a retry normally finds its key's record): stored only if the key has no live
    record by now."""
    replay = duplicate_answer(dup)
    if replay is None:
        return
    with db.write() as (conn, now):
        if idempotency.peek(conn, now, scope_key) is None:
            idempotency.store_done(conn, now, scope_key, request_hash, ttl_ms, *replay)
