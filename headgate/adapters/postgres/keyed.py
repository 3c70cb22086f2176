"""`POST /api/v1/jobs` on PostgreSQL in one statement (`Store.enqueue_keyed`).

The shared path (`idempotent_write`, then the enqueue on its connection) is seven round
trips, and from the enqueue on, the transaction holds its queue's lock and counter rows
until the commit. Here the key's lock, its record, the enqueue and the answer to replay
are one call of `headgate_enqueue_keyed_v1` (headgate/db/postgres/functions/keyed.sql)
in autocommit: one round trip, committed on the server as the call returns, so nothing
of the client's runs while the queue's lock is held. One statement also spares the
request's thread the driver's work per statement (~100 µs of CPU a statement on a 2-vCPU
machine), which it does holding the GIL every other request of the process needs.

Concurrent requests of one process go as one call (`KeyedBatcher`,
`headgate_enqueue_keyed_many_v1`): each enqueue holds its queue's lock, and its NOTIFY
PostgreSQL's database-wide commit lock, across its commit's WAL flush, so requests
committed one at a time wait for each other's flush; a batch shares one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import NamedTuple

import psycopg

from headgate.adapters.shared import idempotency
from headgate.adapters.shared.combiner import Combiner
from headgate.adapters.shared.enqueue_rows import EnqueueResult
from headgate.adapters.shared.queries import fill, load
from headgate.core import Duplicate, Envelope
from headgate.core.records import IdempotencyRecord
from headgate.store.port import Answer

from .connection import PgDatabase
from .enqueue import ONE_ARGS, _row, result, serve_alone

Q = load(__name__)
ENQUEUE_KEYED = fill(Q["enqueue_keyed"], one_args=ONE_ARGS)
ENQUEUE_KEYED_MANY = Q["enqueue_keyed_many"]


class KeyedRequest(NamedTuple):
    scope_key: str
    request_hash: str
    env: Envelope
    answer: Answer
    origin: str | None
    ttl_ms: int


def decided(env: Envelope, row: tuple) -> IdempotencyRecord | EnqueueResult:
    """A request's row (its rec_* columns, then the enqueue's): the key's live record,
    or what the enqueue did; a refusal raised as its typed error."""
    if row[1] is not None:
        return idempotency.record(*row[:5])
    return result([env], row[5:])


def _call_one(raw: psycopg.Connection, r: KeyedRequest) -> tuple:
    status, headers, body = r.answer
    purge = idempotency.PURGE_BATCH if idempotency.purge_due() else 0
    row = raw.execute(ENQUEUE_KEYED, [
        r.scope_key, r.request_hash, idempotency.STALE_MS, purge, status,
        json.dumps(headers), body, r.ttl_ms, *_row(r.env), r.origin]).fetchone()
    assert row is not None
    return tuple(row)


def call_many(raw: psycopg.Connection, requests: Sequence[KeyedRequest]) -> list[tuple]:
    """Several requests in one autocommit statement; each one's row, in their order.
    The items go sorted by queue (the function says why), their answers come back by
    position."""
    order = sorted(range(len(requests)),
                   key=lambda i: (requests[i].env.queue, requests[i].scope_key))
    items = [requests[i] for i in order]
    purge = idempotency.PURGE_BATCH if idempotency.purge_due() else 0
    job_columns = [list(c) for c in zip(*(_row(r.env) for r in items), strict=True)]
    rows = raw.execute(ENQUEUE_KEYED_MANY, [
        [r.scope_key for r in items], [r.request_hash for r in items],
        idempotency.STALE_MS, purge, [r.answer[0] for r in items],
        [json.dumps(r.answer[1]) for r in items], [r.answer[2] for r in items],
        [r.ttl_ms for r in items], *job_columns, items[0].origin]).fetchall()
    out: list[tuple] = [()] * len(requests)
    for row in rows:
        out[order[row[0] - 1]] = tuple(row[1:])
    return out


class KeyedBatcher(Combiner[KeyedRequest, tuple]):
    """The keyed enqueues of concurrent threads as one call (the module says why): one
    request alone goes by `headgate_enqueue_keyed_v1` as before. A batch whose call
    fails (a deadlock with another process taking the same keys in another order, a
    lost connection) is sent again one request at a time, so each gets its own answer
    or error."""

    def __init__(self, db: PgDatabase) -> None:
        super().__init__()
        self.db = db

    def _serve(self) -> None:
        batch = self._take()
        if len(batch) > 1:
            try:
                with self.db.autocommit() as conn:
                    rows = call_many(conn.raw, [s.request for s in batch])
            except Exception:  # noqa: BLE001 - each request's own call says what failed
                pass
            else:
                for slot, row in zip(batch, rows, strict=True):
                    slot.result = row
                return
        serve_alone(self.db, batch, _call_one)


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
