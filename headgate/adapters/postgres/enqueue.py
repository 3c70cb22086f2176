"""PostgreSQL enqueue in one round trip: the batch as arrays to `headgate_enqueue`
(db/postgres/0006_enqueue_function.sql), which checks, inserts, counts and sends the
wake-up NOTIFY inside the same transaction.

The shared enqueue (headgate/adapters/sql/enqueue.py) costs about ten round trips on
PostgreSQL — the clock, BEGIN, each check, each insert, COMMIT — and a producer's call
waits for every one of them. Here a standalone enqueue is one autocommit statement, and
one statement inside a caller's transaction.

The split: a batch holding any envelope with a unique key (lifecycle, throttle,
replace, debounce) still goes through the shared code, whose per-key locking and holder
replacement are not repeated in SQL; it takes the queue locks first like the function,
and sends its NOTIFY in its own transaction too. Everything else takes the function.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache

import psycopg
from psycopg.pq import TransactionStatus

from headgate.adapters.sql import enqueue as shared
from headgate.core import Backpressure, Envelope, IdConflict, InvalidInput, Quarantined

from .connection import CLOCK, PgConnection
from .notify import CHANNEL, encode

# (column, element type) in headgate_enqueue's argument order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "text"), ("kind", "text"), ("schema_version", "integer"), ("payload", "bytea"),
    ("fingerprint", "text"), ("queue", "text"), ("priority", "integer"),
    ("partition_key", "text"), ("rate_class", "text"), ("weight", "bigint"),
    ("scheduled_at_ms", "bigint"), ("max_attempts", "integer"), ("retention_ms", "bigint"),
    ("tags", "text"), ("sticky_worker", "text"), ("headers", "text"),
    ("periodic_schedule_id", "text"), ("periodic_tick_ms", "bigint"), ("pending", "boolean"),
)
NOTIFY = "SELECT pg_notify(?, ?)"


@lru_cache(maxsize=64)
def statement(single: tuple[bool, ...]) -> str:
    """The call with a one-element array built on the server for each column the batch
    holds one value of: psycopg then dumps one value, not a list (~60 µs for a single
    job's nineteen one-element lists, ~3 ms for a thousand jobs' lists). Binary (%b)
    parameters skip text escaping."""
    args = ", ".join(
        f"ARRAY[%b::{kind}]" if one else f"%b::{kind}[]"
        for (_, kind), one in zip(COLUMNS, single, strict=True)
    )
    return (
        "SELECT outcome, subject, queue_limit, current, incoming, received_queues "
        f"FROM headgate_enqueue({args}, %b::text)"
    )


def has_unique_key(envs: Sequence[Envelope]) -> bool:
    return any(env.unique_key is not None for env in envs)


def _columns(envs: Sequence[Envelope]) -> list[list]:
    """One list per column; a comprehension each is cheaper than per-row tuples."""
    return [
        [e.id for e in envs],
        [e.kind for e in envs],
        [e.schema_version for e in envs],
        [e.payload for e in envs],
        [e.fingerprint for e in envs],
        [e.queue for e in envs],
        [e.priority for e in envs],
        [e.partition_key for e in envs],
        [e.rate_class for e in envs],
        [e.weight for e in envs],
        [e.scheduled_at_ms for e in envs],
        [e.max_attempts for e in envs],
        [e.retention_ms for e in envs],
        # The text the shared code stores, so an id's identity compares equal across both.
        [json.dumps(list(e.tags)) if e.tags else "[]" for e in envs],
        [e.sticky_worker for e in envs],
        [json.dumps(e.headers) if e.headers else "{}" for e in envs],
        [e.periodic_schedule_id for e in envs],
        [e.periodic_tick_ms for e in envs],
        [e.pending for e in envs],
    ]


def _params(envs: Sequence[Envelope]) -> tuple[str, list]:
    n = len(envs)
    single: list[bool] = []
    params: list = []
    for i, values in enumerate(_columns(envs)):
        first = values[0]
        # ids are never alike in a batch; count() compares in C, identity first.
        one = n == 1 or (i > 0 and values.count(first) == n)
        single.append(one)
        params.append(first if one else values)
    return statement(tuple(single)), params


def call(raw: psycopg.Connection, envs: Sequence[Envelope], origin: str | None) -> set[str]:
    """Run the function on `raw` (in whatever transaction it is in); raise what the
    shared code raises, else return the queues that received jobs."""
    ids = [e.id for e in envs]
    if len(set(ids)) != len(ids):
        raise InvalidInput("batch contains the same id twice")
    sql, params = _params(envs)
    row = raw.execute(sql, [*params, origin]).fetchone()
    assert row is not None
    outcome, subject, limit, current, incoming, queues = row
    if outcome == "id_conflict":
        raise IdConflict(subject)
    if outcome == "quarantined":
        raise Quarantined(subject)
    if outcome == "backpressure":
        raise Backpressure(subject, int(limit), int(current), int(incoming))
    return set(queues)


@contextmanager
def autocommit(raw: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """One statement as its own transaction: no BEGIN and no COMMIT round trip. The
    pool's connections are transactional, so the setting goes back before it is
    returned, or the connection is closed so the pool replaces it."""
    raw.autocommit = True
    try:
        yield raw
    finally:
        if not raw.closed and raw.info.transaction_status == TransactionStatus.IDLE:
            raw.autocommit = False
        else:
            raw.close()


def shared_enqueue(
    conn: PgConnection, envs: Sequence[Envelope], origin: str | None
) -> shared.EnqueueResult:
    """The shared code in the current transaction, with the function's lock order and
    a transactional NOTIFY."""
    now = int(conn.execute(CLOCK).fetchone()[0])
    conn.dialect.lock_queues(conn, {e.queue for e in envs})
    result = shared.enqueue(conn, now, envs)
    if result.inserted and origin is not None:
        conn.execute(NOTIFY, (CHANNEL, encode(result.queues, origin)))
    return result
