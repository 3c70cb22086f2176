"""`POST /api/v1/jobs` on PostgreSQL in two round trips (`Store.enqueue_keyed`).

The shared path (`idempotent_write`, then the enqueue on its connection) is seven round
trips, and from the enqueue on, the transaction holds its queue's lock and counter rows
until the commit: while the request's thread waits for its turn at the GIL to read the
function's answer and send COMMIT, every other request for that queue waits too. Here the
key's lock and record are one round trip (BEGIN, the lock with the clock, the record's
read, pipelined), and the enqueue, the stored answer and COMMIT a second: the enqueue and
its answer are one statement, and COMMIT goes in the same flush, so nothing of the
client's runs between the queue's lock and its release.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg

from headgate.adapters.sql import idempotency
from headgate.adapters.sql.enqueue import EnqueueResult
from headgate.core import Duplicate, Envelope
from headgate.store.port import Answer

from .connection import CLOCK, PgDatabase, translate
from .enqueue import CALL_ONE, RESULT, _row, result

LOCK_AND_CLOCK = translate(idempotency.KEY_LOCK) + f", ({CLOCK})"
PEEK = translate(idempotency.SELECT_KEY.format(for_update=" FOR UPDATE"))
PURGE = translate(idempotency.PURGE)
# The enqueue and the key's answer: stored only for a job enqueued (outcome 'ok'), so a
# refusal or a held unique key stores nothing, as on the shared path.
_INSERT_DONE = translate(idempotency.INSERT_DONE)
_ON_CONFLICT_DONE = translate(idempotency.ON_CONFLICT_DONE)
ENQUEUE_ANSWERED = f"""
WITH enqueued AS MATERIALIZED (SELECT * FROM {CALL_ONE}),
answered AS (
    {_INSERT_DONE}
    SELECT %s, %s, 'done', %s, %s, %s, %s, %s FROM enqueued WHERE outcome = 'ok'
    {_ON_CONFLICT_DONE}
)
{RESULT} FROM enqueued
"""

def enqueue_keyed(raw: psycopg.Connection, scope_key: str, request_hash: str,
                  env: Envelope, answer: Answer, origin: str | None, ttl_ms: int,
                  ) -> dict | EnqueueResult:
    """On an autocommit connection: the key's live record (nothing enqueued), or what
    the enqueue did, its answer stored. Typed refusals raise after the commit, which
    then wrote nothing."""
    with raw.pipeline() as pipeline:
        raw.execute("BEGIN")
        lock = raw.execute(LOCK_AND_CLOCK, (scope_key.encode(),))
        peek = raw.execute(PEEK, (scope_key,))
        pipeline.sync()
        now = int(lock.fetchone()[1])  # type: ignore[index]
        record = idempotency.live_record(peek.fetchone(), now)
        if record is not None:
            raw.execute("COMMIT")
            return record
        if idempotency.purge_due():
            raw.execute(PURGE, (now, idempotency.PURGE_BATCH))
        status, headers, body = answer
        enqueued = raw.execute(ENQUEUE_ANSWERED, [
            *_row(env), origin, scope_key, request_hash, status,
            json.dumps(headers), body, now, now + ttl_ms])
        raw.execute("COMMIT")
        pipeline.sync()
        row = enqueued.fetchone()
    return result([env], row)


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
