"""PostgreSQL enqueue in one round trip: the batch as arrays to `headgate_enqueue_v2`
(headgate/db/postgres/functions/enqueue.sql), which checks, inserts, counts and sends
the wake-up NOTIFY inside the same transaction.

The shared enqueue (headgate/adapters/sql/enqueue.py) costs about ten round trips on
PostgreSQL — the clock, BEGIN, each check, each insert, COMMIT — and a producer's call
waits for every one of them. Here a standalone enqueue is one autocommit statement, and
one statement inside a caller's transaction.

The split: a batch holding any envelope with a unique key (lifecycle, throttle,
replace, debounce) still goes through the shared code, whose per-key locking and holder
replacement are not repeated in SQL; it takes the key locks, then the queue locks the
function takes, and sends its NOTIFY in its own transaction too. Everything else takes the function.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from headgate.adapters.sql import enqueue as shared
from headgate.adapters.sql.rows import headers_text, tags_text
from headgate.core import Backpressure, Envelope, IdConflict, InvalidInput, Quarantined

from .connection import CLOCK, PgConnection
from .notify import CHANNEL, encode

# One job: each argument a one-element array built on the server, so psycopg dumps
# scalars (~2 µs for the nineteen) rather than lists (~60 µs).
ENQUEUE_ONE = """
SELECT outcome, subject, queue_limit, current, incoming, received_queues
FROM headgate_enqueue_v2(ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::integer],
    ARRAY[%b::bytea], ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::integer],
    ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::bigint], ARRAY[%b::bigint],
    ARRAY[%b::integer], ARRAY[%b::bigint], ARRAY[%b::text], ARRAY[%b::text],
    ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::bigint], ARRAY[%b::boolean], %b::text)
"""
# One job as one plain statement (no PL/pgSQL frame: on a backend idle between jobs the
# function's call cost ~1 ms more than the insert itself). It takes the queue's lock,
# then inserts only when the queue row exists, has no enqueue limit and the fingerprint
# is not quarantined, and the id is new; it returns how many rows it inserted (0 or 1).
# Anything else (a replayed or conflicting id, quarantine, backpressure, a first job on
# a new queue) inserts nothing and is left to headgate_enqueue, which decides it after
# the lock. Those checks read the statement's snapshot, taken before the lock: a
# quarantine or a limit committed in between applies from the next enqueue on (the job
# is then one a moment earlier would have been too; admission still skips quarantined
# fingerprints).
ENQUEUE_PLAIN = """
WITH clock AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms,
           count(pg_advisory_xact_lock(
               hashtextextended(%(queue)s::text, headgate_queue_lock_seed()))) AS locked
), ready AS MATERIALIZED (
    SELECT clock.now_ms FROM clock
    JOIN queues q ON q.name = %(queue)s::text AND q.max_unfinished_jobs IS NULL
    WHERE NOT EXISTS (SELECT 1 FROM quarantine WHERE fingerprint = %(fingerprint)s::text)
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
    RETURNING queue, enqueued_at_ms
), arrived AS (
    INSERT INTO queue_history (queue, bucket_ms, arrived)
    SELECT queue, enqueued_at_ms - enqueued_at_ms %% headgate_history_bucket_ms(), 1 FROM inserted
    ON CONFLICT (queue, bucket_ms) DO UPDATE SET arrived = queue_history.arrived + 1
    RETURNING queue
)
SELECT count(*), count(CASE WHEN %(origin)s::text IS NOT NULL
                            THEN pg_notify('headgate', %(origin)s::text || '|' || queue) END)
FROM arrived
"""
# A batch: one array per column, in binary (no text escaping); a column with one value
# for the whole batch is sent as a one-element array and repeated by the server.
ENQUEUE_MANY = """
SELECT outcome, subject, queue_limit, current, incoming, received_queues
FROM headgate_enqueue_v2(%b::text[], %b::text[], %b::integer[], %b::bytea[], %b::text[],
    %b::text[], %b::integer[], %b::text[], %b::text[], %b::bigint[], %b::bigint[],
    %b::integer[], %b::bigint[], %b::text[], %b::text[], %b::text[], %b::text[],
    %b::bigint[], %b::boolean[], %b::text)
"""
NOTIFY = "SELECT pg_notify(?, ?)"


def has_unique_key(envs: Sequence[Envelope]) -> bool:
    return any(env.unique_key is not None for env in envs)


# The function's arguments in order (one per column); ENQUEUE_PLAIN binds them by name.
ROW_FIELDS = (
    "id", "kind", "schema_version", "payload", "fingerprint", "queue", "priority",
    "partition_key", "rate_class", "weight", "scheduled_at_ms", "max_attempts",
    "retention_ms", "tags", "sticky_worker", "headers", "periodic_schedule_id",
    "periodic_tick_ms", "pending",
)


def _row(e: Envelope) -> list:
    return [
        e.id, e.kind, e.schema_version, e.payload, e.fingerprint, e.queue, e.priority,
        e.partition_key, e.rate_class, e.weight, e.scheduled_at_ms, e.max_attempts,
        e.retention_ms, tags_text(e.tags), e.sticky_worker, headers_text(e.headers),
        e.periodic_schedule_id, e.periodic_tick_ms, e.pending,
    ]


def _plain_params(e: Envelope, origin: str | None) -> dict:
    return {**dict(zip(ROW_FIELDS, _row(e), strict=True)), "origin": origin}


def _columns(envs: Sequence[Envelope]) -> list[list]:
    """One list per column, shortened to one element where the whole batch holds one
    value (the server repeats it)."""
    columns = [list(values) for values in zip(*map(_row, envs), strict=True)]
    n = len(envs)
    # ids differ within a batch; count() compares in C, identity first.
    return columns[:1] + [
        values[:1] if values.count(values[0]) == n else values for values in columns[1:]
    ]


def call(raw: psycopg.Connection, envs: Sequence[Envelope], origin: str | None) -> set[str]:
    """Run the function on `raw` (in whatever transaction it is in); raise what the
    shared code raises, else return the queues that received jobs."""
    ids = [e.id for e in envs]
    if len(set(ids)) != len(ids):
        raise InvalidInput("batch contains the same id twice")
    if len(envs) == 1:
        env = envs[0]
        if raw.execute(ENQUEUE_PLAIN, _plain_params(env, origin)).fetchone()[0]:
            return {env.queue}
        row = raw.execute(ENQUEUE_ONE, [*_row(env), origin]).fetchone()
    else:
        row = raw.execute(ENQUEUE_MANY, [*_columns(envs), origin]).fetchone()
    return received(row)


def received(row: tuple | None) -> set[str]:
    """The queues an enqueue call's result row says received jobs; its refusal raised
    as the typed error the shared enqueue raises."""
    assert row is not None
    outcome, subject, limit, current, incoming, queues = row
    if outcome == "id_conflict":
        raise IdConflict(subject)
    if outcome == "quarantined":
        raise Quarantined(subject)
    if outcome == "backpressure":
        raise Backpressure(subject, int(limit), int(current), int(incoming))
    return set(queues or ())


def shared_enqueue(
    conn: PgConnection, envs: Sequence[Envelope], origin: str | None
) -> shared.EnqueueResult:
    """The shared code in the current transaction (it takes the locks, keys before
    queues), with a transactional NOTIFY."""
    now = int(conn.execute(CLOCK).fetchone()[0])
    result = shared.enqueue(conn, now, envs)
    if result.inserted and origin is not None:
        conn.execute(NOTIFY, (CHANNEL, encode(result.queues, origin)))
    return result
