-- headgate_enqueue_v2: PostgreSQL enqueue in one call. It does what the shared enqueue
-- (headgate/adapters/sql/enqueue.py) does for envelopes without a unique key, in one
-- statement the client sends once: id identity, quarantine, backpressure, the insert
-- (the counters are the statement triggers of counters.sql), the arrival history and
-- the wake-up NOTIFY, which PostgreSQL delivers only if the transaction commits. SQLite
-- has no round trips to save and runs the shared code.
--
-- A refusal is returned, not raised, and comes before any write: an enqueue inside a
-- caller's own transaction leaves that transaction usable, as the shared code does.
-- outcome is 'ok', 'id_conflict' (subject = the id), 'quarantined' (subject = the
-- fingerprint) or 'backpressure' (subject = the queue, with limit/current/incoming);
-- received_queues lists the queues that received jobs.
--
-- Few, plain statements: each statement a PL/pgSQL function runs pays executor start-up.
-- The queues one job names are known without a query; existing ids and quarantined
-- fingerprints are looked up by `= ANY(...)` (a join with the argument arrays let the
-- generic plan scan a whole index of jobs for one id); the insert, its arrival history
-- and the NOTIFY are one statement.
--
-- A column whose value is the same for the whole batch may come as a one-element array
-- (the client then sends one value instead of a thousand); headgate_widen repeats it.

CREATE OR REPLACE FUNCTION headgate_widen(a ANYARRAY, n INTEGER) RETURNS ANYARRAY
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN cardinality(a) = n THEN a ELSE array_fill(a[1], ARRAY[n]) END
$$;

CREATE OR REPLACE FUNCTION headgate_enqueue_v2(
    p_id TEXT[], p_kind TEXT[], p_schema_version INTEGER[], p_payload BYTEA[],
    p_fingerprint TEXT[], p_queue TEXT[], p_priority INTEGER[], p_partition_key TEXT[],
    p_rate_class TEXT[], p_weight BIGINT[], p_scheduled_at_ms BIGINT[],
    p_max_attempts INTEGER[], p_retention_ms BIGINT[], p_tags TEXT[], p_sticky_worker TEXT[],
    p_headers TEXT[], p_periodic_schedule_id TEXT[], p_periodic_tick_ms BIGINT[],
    p_pending BOOLEAN[], p_origin TEXT,
    OUT outcome TEXT, OUT subject TEXT, OUT queue_limit BIGINT, OUT current BIGINT,
    OUT incoming BIGINT, OUT received_queues TEXT[]
) LANGUAGE plpgsql
-- Custom plans would be re-planned on every call (their array arguments make the
-- generic plan look dearer); planning cost more than running. A generic plan is made
-- once per session, often while jobs is still small: no sequential scans, or the id
-- probe stays a scan of the whole table as it grows (O(n) per enqueue).
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    -- The store clock, as the shared code reads it at the start of its transaction.
    now_ms BIGINT := (extract(epoch from clock_timestamp()) * 1000)::bigint;
    n INTEGER := cardinality(p_id);
    existing TEXT[];
    missing BOOLEAN;  -- a queue has no row yet
    limited BOOLEAN;  -- a queue has an enqueue limit
    sent BIGINT;      -- NOTIFYs sent: 1, or 0 without an origin
BEGIN
    outcome := 'ok';
    IF n > 1 THEN
        SELECT headgate_widen(p_kind, n), headgate_widen(p_schema_version, n),
               headgate_widen(p_payload, n), headgate_widen(p_fingerprint, n),
               headgate_widen(p_queue, n), headgate_widen(p_priority, n),
               headgate_widen(p_partition_key, n), headgate_widen(p_rate_class, n),
               headgate_widen(p_weight, n), headgate_widen(p_scheduled_at_ms, n),
               headgate_widen(p_max_attempts, n), headgate_widen(p_retention_ms, n),
               headgate_widen(p_tags, n), headgate_widen(p_sticky_worker, n),
               headgate_widen(p_headers, n), headgate_widen(p_periodic_schedule_id, n),
               headgate_widen(p_periodic_tick_ms, n), headgate_widen(p_pending, n)
        INTO p_kind, p_schema_version, p_payload, p_fingerprint, p_queue, p_priority,
             p_partition_key, p_rate_class, p_weight, p_scheduled_at_ms, p_max_attempts,
             p_retention_ms, p_tags, p_sticky_worker, p_headers, p_periodic_schedule_id,
             p_periodic_tick_ms, p_pending;
        received_queues := ARRAY(SELECT DISTINCT b.queue COLLATE "C"
                                 FROM unnest(p_queue) AS b(queue) ORDER BY 1);
    ELSE
        received_queues := p_queue;
    END IF;

    -- Queue locks before any counter row, in the order every job-state transaction takes
    -- them (sorted by code point): admission and acks update queue_counts and partitions
    -- too, and the backpressure read below sees counts no other writer is changing.
    -- In the same statement: which ids exist, the first quarantined fingerprint, and
    -- whether a queue row is missing or limits enqueues (else two statements are skipped).
    SELECT ARRAY(SELECT j.id FROM jobs j WHERE j.id = ANY(p_id)),
           (SELECT q.fingerprint FROM quarantine q WHERE q.fingerprint = ANY(p_fingerprint)
            ORDER BY q.fingerprint LIMIT 1),
           queue_rows.missing, queue_rows.limited
    INTO existing, subject, missing, limited
    FROM (SELECT count(pg_advisory_xact_lock(
                      hashtextextended(u.name, headgate_queue_lock_seed())))
          FROM unnest(received_queues) AS u(name)) AS locked,
         (SELECT bool_or(q.name IS NULL) AS missing,
                 bool_or(q.max_unfinished_jobs IS NOT NULL) AS limited
          FROM unnest(received_queues) AS u(name)
          LEFT JOIN queues q ON q.name = u.name) AS queue_rows;

    -- Caller-supplied ids: the same content again is success without a rewrite,
    -- different content is a conflict.
    IF cardinality(existing) > 0 THEN
        SELECT b.id INTO subject
        FROM unnest(p_id, p_kind, p_schema_version, p_payload, p_queue, p_priority,
                    p_partition_key, p_rate_class, p_weight, p_max_attempts, p_tags,
                    p_sticky_worker, p_headers) WITH ORDINALITY
             AS b(id, kind, schema_version, payload, queue, priority, partition_key,
                  rate_class, weight, max_attempts, tags, sticky_worker, headers, ord)
        JOIN jobs j ON j.id = b.id
        WHERE j.id = ANY(existing)
          AND ((j.kind, j.schema_version, j.payload, j.queue, j.priority, j.partition_key,
                j.rate_class, j.weight, j.max_attempts, j.tags, j.sticky_worker)
               IS DISTINCT FROM
               (b.kind, b.schema_version, b.payload, b.queue, b.priority, b.partition_key,
                b.rate_class, b.weight, b.max_attempts, b.tags, b.sticky_worker)
               OR j.headers::jsonb IS DISTINCT FROM b.headers::jsonb)
        ORDER BY b.ord LIMIT 1;
        IF FOUND THEN
            outcome := 'id_conflict';
            received_queues := '{}';
            RETURN;
        END IF;
        -- From here on the arrays hold only the jobs to insert, in batch order.
        SELECT array_agg(b.id ORDER BY b.ord), array_agg(b.kind ORDER BY b.ord),
               array_agg(b.schema_version ORDER BY b.ord), array_agg(b.payload ORDER BY b.ord),
               array_agg(b.fingerprint ORDER BY b.ord), array_agg(b.queue ORDER BY b.ord),
               array_agg(b.priority ORDER BY b.ord), array_agg(b.partition_key ORDER BY b.ord),
               array_agg(b.rate_class ORDER BY b.ord), array_agg(b.weight ORDER BY b.ord),
               array_agg(b.scheduled_at_ms ORDER BY b.ord),
               array_agg(b.max_attempts ORDER BY b.ord),
               array_agg(b.retention_ms ORDER BY b.ord), array_agg(b.tags ORDER BY b.ord),
               array_agg(b.sticky_worker ORDER BY b.ord), array_agg(b.headers ORDER BY b.ord),
               array_agg(b.periodic_schedule_id ORDER BY b.ord),
               array_agg(b.periodic_tick_ms ORDER BY b.ord),
               array_agg(b.pending ORDER BY b.ord)
        INTO p_id, p_kind, p_schema_version, p_payload, p_fingerprint, p_queue, p_priority,
             p_partition_key, p_rate_class, p_weight, p_scheduled_at_ms, p_max_attempts,
             p_retention_ms, p_tags, p_sticky_worker, p_headers, p_periodic_schedule_id,
             p_periodic_tick_ms, p_pending
        FROM unnest(p_id, p_kind, p_schema_version, p_payload, p_fingerprint, p_queue,
                    p_priority, p_partition_key, p_rate_class, p_weight, p_scheduled_at_ms,
                    p_max_attempts, p_retention_ms, p_tags, p_sticky_worker, p_headers,
                    p_periodic_schedule_id, p_periodic_tick_ms, p_pending) WITH ORDINALITY
             AS b(id, kind, schema_version, payload, fingerprint, queue, priority,
                  partition_key, rate_class, weight, scheduled_at_ms, max_attempts,
                  retention_ms, tags, sticky_worker, headers, periodic_schedule_id,
                  periodic_tick_ms, pending, ord)
        WHERE b.id <> ALL (existing);
        IF p_id IS NULL THEN
            received_queues := '{}';
            RETURN;
        END IF;
        received_queues := ARRAY(SELECT DISTINCT b.queue COLLATE "C"
                                 FROM unnest(p_queue) AS b(queue) ORDER BY 1);
        subject := (SELECT q.fingerprint FROM quarantine q
                    WHERE q.fingerprint = ANY(p_fingerprint)
                    ORDER BY q.fingerprint LIMIT 1);
    END IF;

    IF subject IS NOT NULL THEN
        outcome := 'quarantined';
        received_queues := '{}';
        RETURN;
    END IF;

    IF limited THEN
        SELECT q.name, q.max_unfinished_jobs, u.n, i.n
        INTO subject, queue_limit, current, incoming
        FROM (SELECT b.queue, count(*) AS n FROM unnest(p_queue) AS b(queue)
              GROUP BY b.queue) i
        JOIN queues q ON q.name = i.queue AND q.max_unfinished_jobs IS NOT NULL
        CROSS JOIN LATERAL (
            SELECT coalesce(sum(c.n), 0)::bigint AS n FROM queue_counts c
            WHERE c.queue = q.name
              AND c.state IN ('pending', 'scheduled', 'available', 'running', 'retryable')
        ) u
        WHERE u.n + i.n > q.max_unfinished_jobs
        ORDER BY q.name COLLATE "C" LIMIT 1;
        IF FOUND THEN
            outcome := 'backpressure';
            received_queues := '{}';
            RETURN;
        END IF;
    END IF;

    IF missing THEN
        INSERT INTO queues (name, created_at_ms)
        SELECT u.name, now_ms FROM unnest(received_queues) AS u(name)
        ON CONFLICT (name) DO NOTHING;
    END IF;

    -- ORDER BY: rowid is arrival order, and a batch arrives in its own order. The
    -- NOTIFY carries the payload of headgate/adapters/postgres/notify.py encode():
    -- origin, then the queues joined by U+001F, or none ("something changed") when long.
    WITH inserted AS (
        INSERT INTO jobs (id, kind, schema_version, payload, fingerprint, queue, priority,
            partition_key, rate_class, weight, state, scheduled_at_ms, max_attempts,
            retention_ms, tags, sticky_worker, headers, enqueued_at_ms, periodic_schedule_id,
            periodic_tick_ms, was_pending)
        SELECT b.id, b.kind, b.schema_version, b.payload, b.fingerprint, b.queue, b.priority,
               b.partition_key, b.rate_class, b.weight,
               CASE WHEN b.pending THEN 'pending'
                    WHEN coalesce(nullif(b.scheduled_at_ms, 0), now_ms) > now_ms
                        THEN 'scheduled'
                    ELSE 'available' END,
               coalesce(nullif(b.scheduled_at_ms, 0), now_ms), b.max_attempts,
               coalesce(b.retention_ms, headgate_default_retention_ms()), b.tags,
               b.sticky_worker, b.headers, now_ms,
               b.periodic_schedule_id, b.periodic_tick_ms, b.pending::int
        FROM unnest(p_id, p_kind, p_schema_version, p_payload, p_fingerprint, p_queue,
                    p_priority, p_partition_key, p_rate_class, p_weight, p_scheduled_at_ms,
                    p_max_attempts, p_retention_ms, p_tags, p_sticky_worker, p_headers,
                    p_periodic_schedule_id, p_periodic_tick_ms, p_pending) WITH ORDINALITY
             AS b(id, kind, schema_version, payload, fingerprint, queue, priority,
                  partition_key, rate_class, weight, scheduled_at_ms, max_attempts,
                  retention_ms, tags, sticky_worker, headers, periodic_schedule_id,
                  periodic_tick_ms, pending, ord)
        ORDER BY b.ord
        RETURNING queue
    ), arrived AS (
        INSERT INTO queue_history (queue, bucket_ms, arrived)
        SELECT i.queue, now_ms - now_ms % headgate_history_bucket_ms(), count(*)
        FROM inserted AS i
        GROUP BY i.queue ORDER BY i.queue COLLATE "C"
        ON CONFLICT (queue, bucket_ms) DO UPDATE SET
            arrived = queue_history.arrived + excluded.arrived
        RETURNING 1
    ), body AS (
        SELECT array_to_string(received_queues, chr(31)) AS text
        FROM (SELECT count(*) FROM arrived) AS written
    )
    SELECT count(pg_notify('headgate', p_origin || '|' ||
                           CASE WHEN length(body.text) < headgate_notify_queues_max_chars()
                                THEN body.text ELSE '' END))
    INTO sent
    FROM body WHERE p_origin IS NOT NULL;
END $$;
