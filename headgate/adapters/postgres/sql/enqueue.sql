-- PostgreSQL's enqueue in one round trip (enqueue.py): the batch as arrays to
-- headgate_enqueue_v3 (headgate/db/postgres/functions/enqueue.sql). psycopg's own
-- placeholders: %b binary, %(name)s by name.

-- name: result
-- The function's result columns, for enqueue_one and enqueue_many.
SELECT outcome, subject, queue_limit, current, incoming, received_queues,
       duplicate_id, replaced, inserted

-- name: one_args
-- One job: each argument a one-element array built on the server, so psycopg dumps
-- scalars rather than lists (what keyed.py's call passes too).
ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::integer],
    ARRAY[%b::bytea], ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::integer],
    ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::bigint], ARRAY[%b::bigint],
    ARRAY[%b::integer], ARRAY[%b::bigint], ARRAY[%b::text], ARRAY[%b::text],
    ARRAY[%b::text], ARRAY[%b::text], ARRAY[%b::bigint], ARRAY[%b::boolean],
    ARRAY[%b::bytea], ARRAY[%b::bigint], ARRAY[%b::integer], ARRAY[%b::bigint], %b::text

-- name: enqueue_one
{result}
FROM headgate_enqueue_v3({one_args})

-- name: enqueue_plain
-- One job without a unique key as one plain statement: the function's early exit, sent
-- first (no PL/pgSQL frame: on a backend idle between jobs the function's call cost
-- about a millisecond more than the insert itself). It takes the queue's lock, then
-- inserts only when the function's gate says plain (headgate_enqueue_gate_v1 in
-- headgate/db/postgres/functions/checks.sql: the queue row exists, has no enqueue limit
-- and the fingerprint is not quarantined), and the id is new; it returns how many rows
-- it inserted (0 or 1). Anything else (a replayed or conflicting id, quarantine,
-- backpressure, a first job on a new queue) inserts nothing and is left to
-- headgate_enqueue_v3, which decides it after the lock. Its arrivals are the insert
-- trigger's (counters.sql), its NOTIFY the function's (headgate_wake_v1, checks.sql).
-- Those checks read the statement's snapshot, taken before the lock: a quarantine or a
-- limit committed in between applies from the next enqueue on (the job is then one a
-- moment earlier would have been too; admission still skips quarantined fingerprints).
WITH clock AS MATERIALIZED (
    SELECT headgate_now_ms() AS now_ms,
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

-- name: enqueue_many
-- A batch: one array per column, in binary (no text escaping); a column with one value
-- for the whole batch is sent as a one-element array and repeated by the server.
{result}
FROM headgate_enqueue_v3(%b::text[], %b::text[], %b::integer[], %b::bytea[], %b::text[],
    %b::text[], %b::integer[], %b::text[], %b::text[], %b::bigint[], %b::bigint[],
    %b::integer[], %b::bigint[], %b::text[], %b::text[], %b::text[], %b::text[],
    %b::bigint[], %b::boolean[], %b::bytea[], %b::bigint[], %b::integer[], %b::bigint[],
    %b::text)
