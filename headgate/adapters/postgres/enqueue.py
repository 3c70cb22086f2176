"""PostgreSQL enqueue in one round trip: the batch as arrays to `headgate_enqueue_v3`
(headgate/db/postgres/functions/enqueue.sql), which checks ids, quarantine, unique keys
and backpressure, inserts (the insert trigger counts the jobs and their arrivals) and
sends the wake-up NOTIFY inside the same transaction: PostgreSQL's statement of the
enqueue policy, as headgate/adapters/sqlite/enqueue.py is SQLite's.

Run in Python over the network, that policy cost about ten round trips (the clock,
BEGIN, each lock and check, each insert, COMMIT), and a producer's call waits for every
one of them. Here a standalone enqueue is one autocommit statement, and one statement
inside a caller's transaction (an HTTP request's, with its idempotency record).
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from headgate.adapters.shared.enqueue_rows import EnqueueResult, effective_unique_key
from headgate.adapters.shared.rows import headers_text, tags_text
from headgate.core import (
    Backpressure,
    Duplicate,
    Envelope,
    IdConflict,
    InvalidInput,
    Quarantined,
)

RESULT = """SELECT outcome, subject, queue_limit, current, incoming, received_queues,
       duplicate_id, replaced, inserted"""
# One job: each argument a one-element array built on the server, so psycopg dumps
# scalars (~2 µs for the twenty-three) rather than lists (~60 µs).
ONE_ARGS = """ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::integer],
    ARRAY[%b::bytea], ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::integer],
    ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::bigint], ARRAY[%b::bigint],
    ARRAY[%b::integer], ARRAY[%b::bigint], ARRAY[%b::text], ARRAY[%b::text],
    ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::bigint], ARRAY[%b::boolean],
    ARRAY[%b::bytea], ARRAY[%b::bigint], ARRAY[%b::integer], ARRAY[%b::bigint], %b::text"""
CALL_ONE = f"headgate_enqueue_v3({ONE_ARGS})"
ENQUEUE_ONE = RESULT + "\nFROM " + CALL_ONE
# One job without a unique key as one plain statement: the function's early exit, sent
# first (no PL/pgSQL frame: on a backend idle between jobs the function's call cost ~1
# ms more than the insert itself). It takes the queue's lock, then inserts only when the
# function's gate says plain (headgate_enqueue_gate_v1 in
# headgate/db/postgres/functions/checks.sql: the queue row exists, has no enqueue limit
# and the fingerprint is not quarantined), and the id is new; it returns how many rows
# it inserted (0 or 1). Anything else (a replayed or conflicting id, quarantine,
# backpressure, a first job on a new queue) inserts nothing and is left to
# headgate_enqueue_v3, which decides it after the lock. Its arrivals are the insert
# trigger's (counters.sql), its NOTIFY the function's (headgate_wake_v1, checks.sql).
# Those checks read the statement's snapshot, taken before the lock: a quarantine or a
# limit committed in between applies from the next enqueue on (the job is then one a
# moment earlier would have been too; admission still skips quarantined fingerprints).
ENQUEUE_PLAIN = """
WITH clock AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms,
           count(headgate_lock_queue_v1(%(queue)s::text)) AS locked
), ready AS MATERIALIZED (
    SELECT clock.now_ms FROM clock,
         headgate_enqueue_gate_v1(ARRAY[%(queue)s::text], ARRAY[%(fingerprint)s::text]) AS gate
    WHERE gate.plain
), inserted AS (
    INSERT INTO jobs (id, kind, schema_version, payload, fingerprint, queue, priority,
        partition_key, rate_class, weight, state, scheduled_at_ms, max_attempts,
        retention_ms, tags, sticky_worker, headers, enqueued_at_ms, periodic_schedule_id,
        periodic_tick_ms, was_pending)
    SELECT %(id)s::text, %(kind)s::text, %(schema_version)s::integer, %(payload)b::bytea,
           %(fingerprint)s::text, %(queue)s::text, %(priority)s::integer,
           %(partition_key)s::text, %(rate_class)s::text, %(weight)s::bigint,
           CASE WHEN %(pending)s::boolean THEN 'pending'
                WHEN coalesce(nullif(%(scheduled_at_ms)s::bigint, 0), now_ms) > now_ms
                    THEN 'scheduled'
                ELSE 'available' END,
           coalesce(nullif(%(scheduled_at_ms)s::bigint, 0), now_ms),
           %(max_attempts)s::integer,
           coalesce(%(retention_ms)s::bigint, headgate_default_retention_ms()),
           %(tags)s::text, %(sticky_worker)s::text, %(headers)s::text, now_ms,
           %(periodic_schedule_id)s::text, %(periodic_tick_ms)s::bigint,
           %(pending)s::boolean::int
    FROM ready
    ON CONFLICT (id) DO NOTHING
    RETURNING queue
)
SELECT count(*), count(headgate_wake_v1(%(origin)s::text, ARRAY[queue])) FROM inserted
"""
# A batch: one array per column, in binary (no text escaping); a column with one value
# for the whole batch is sent as a one-element array and repeated by the server.
ENQUEUE_MANY = RESULT + """
FROM headgate_enqueue_v3(%b::text[], %b::text[], %b::integer[], %b::bytea[], %b::text[],
    %b::text[], %b::integer[], %b::text[], %b::text[], %b::bigint[], %b::bigint[],
    %b::integer[], %b::bigint[], %b::text[], %b::text[], %b::text[], %b::text[],
    %b::bigint[], %b::boolean[], %b::bytea[], %b::bigint[], %b::integer[], %b::bigint[],
    %b::text)
"""


# The function's arguments in order (one per column); ENQUEUE_PLAIN binds them by name.
ROW_FIELDS = (
    "id", "kind", "schema_version", "payload", "fingerprint", "queue", "priority",
    "partition_key", "rate_class", "weight", "scheduled_at_ms", "max_attempts",
    "retention_ms", "tags", "sticky_worker", "headers", "periodic_schedule_id",
    "periodic_tick_ms", "pending", "unique_key", "unique_window_ms", "unique_replace",
    "unique_debounce_ms",
)


def _row(e: Envelope) -> list:
    return [
        e.id, e.kind, e.schema_version, e.payload, e.fingerprint, e.queue, e.priority,
        e.partition_key, e.rate_class, e.weight, e.scheduled_at_ms, e.max_attempts,
        e.retention_ms, tags_text(e.tags), e.sticky_worker, headers_text(e.headers),
        e.periodic_schedule_id, e.periodic_tick_ms, e.pending, effective_unique_key(e),
        e.unique_window_ms, e.unique_replace, e.unique_debounce_ms,
    ]


def _plain_params(e: Envelope, origin: str | None) -> dict:
    return {**dict(zip(ROW_FIELDS, _row(e), strict=True)), "origin": origin}


def columns(envs: Sequence[Envelope]) -> list[list]:
    """One list per column, shortened to one element where the whole batch holds one
    value (the server repeats it)."""
    columns = [list(values) for values in zip(*map(_row, envs), strict=True)]
    n = len(envs)
    # ids differ within a batch; count() compares in C, identity first.
    return columns[:1] + [
        values[:1] if values.count(values[0]) == n else values for values in columns[1:]
    ]


def check_ids(envs: Sequence[Envelope]) -> None:
    ids = [e.id for e in envs]
    if len(set(ids)) != len(ids):
        raise InvalidInput("batch contains the same id twice")


def plain(env: Envelope) -> bool:
    """Whether the early exit may decide `env` (nothing a unique key asks for)."""
    return env.unique_key is None


def inserted_plainly(env: Envelope) -> EnqueueResult:
    """What the early exit's one inserted row means."""
    return EnqueueResult(ids=[env.id], inserted=1, queues={env.queue})  # type: ignore[list-item]


def call(raw: psycopg.Connection, envs: Sequence[Envelope],
         origin: str | None) -> EnqueueResult:
    """Run the function on `raw` (in whatever transaction it is in); raise what
    SQLite's enqueue raises, else return what it returns."""
    check_ids(envs)
    if len(envs) == 1:
        env = envs[0]
        # ENQUEUE_PLAIN is an aggregate: always one row, never None.
        if plain(env) and raw.execute(  # type: ignore[index]
                ENQUEUE_PLAIN, _plain_params(env, origin)).fetchone()[0]:
            return inserted_plainly(env)
        row = raw.execute(ENQUEUE_ONE, [*_row(env), origin]).fetchone()
    else:
        row = raw.execute(ENQUEUE_MANY, [*columns(envs), origin]).fetchone()
    return result(envs, row)


def result(envs: Sequence[Envelope], row: tuple | None) -> EnqueueResult:
    """What an enqueue call's result row says; a refusal raised as the typed error
    SQLite's enqueue raises. A single envelope's Duplicate is returned (its holder's
    replacement is written), a batch's raised (the function wrote nothing)."""
    assert row is not None
    outcome, subject, limit, current, incoming, queues, holder, replaced, inserted = row
    if outcome == "id_conflict":
        raise IdConflict(subject)
    if outcome == "quarantined":
        raise Quarantined(subject)
    if outcome == "repeated_key":
        raise InvalidInput("batch contains the same unique key twice")
    if outcome == "backpressure":
        raise Backpressure(subject, int(limit), int(current), int(incoming))
    if outcome == "duplicate":
        duplicate = Duplicate(holder, bool(replaced))
        if len(envs) > 1:
            raise duplicate
        return EnqueueResult(ids=[holder], inserted=0, queues=set(), duplicate=duplicate)
    return EnqueueResult(ids=[e.id for e in envs], inserted=int(inserted),  # type: ignore[misc]
                         queues=set(queues or ()))
