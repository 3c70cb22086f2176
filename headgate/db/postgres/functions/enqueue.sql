-- headgate_enqueue_v3: PostgreSQL's enqueue, the whole policy in one call: id identity,
-- quarantine, unique keys (with a holder's replacement or debounce), backpressure, the
-- insert (the counters and the arrival history are the statement triggers of
-- counters.sql) and the wake-up NOTIFY (headgate_wake_v1, checks.sql), which PostgreSQL
-- delivers only if the transaction commits.
-- It decides what SQLite's enqueue (headgate/adapters/sqlite/enqueue.py) decides, check for
-- check and in the same order; SQLite has no round trips to save and runs that code.
--
-- A refusal is returned, not raised, and comes before any write: an enqueue inside a
-- caller's own transaction leaves that transaction usable. outcome is 'ok',
-- 'id_conflict' (subject = the id), 'quarantined' (subject = the fingerprint),
-- 'repeated_key' (a batch names one unique key twice), 'duplicate' (duplicate_id = the
-- key's holder; replaced = the holder took this envelope's replacements; a batch is
-- then refused whole, a single envelope's replacement is written) or 'backpressure'
-- (subject = the queue, with limit/current/incoming); received_queues lists the queues
-- that received jobs, inserted how many.
--
-- Few, plain statements: each statement a PL/pgSQL function runs pays executor start-up.
-- The queues one job names are known without a query; existing ids and quarantined
-- fingerprints are looked up by `= ANY(...)` (a join with the argument arrays let the
-- generic plan scan a whole index of jobs for one id); the insert and the NOTIFY are one
-- statement.
--
-- A column whose value is the same for the whole batch may come as a one-element array
-- (the client then sends one value instead of a thousand); headgate_widen repeats it.

CREATE OR REPLACE FUNCTION headgate_widen(a ANYARRAY, n INTEGER) RETURNS ANYARRAY
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN cardinality(a) = n THEN a ELSE array_fill(a[1], ARRAY[n]) END
$$;

CREATE OR REPLACE FUNCTION headgate_enqueue_v3(
    p_id TEXT[], p_kind TEXT[], p_schema_version INTEGER[], p_payload BYTEA[],
    p_fingerprint TEXT[], p_queue TEXT[], p_priority INTEGER[], p_partition_key TEXT[],
    p_rate_class TEXT[], p_weight BIGINT[], p_scheduled_at_ms BIGINT[],
    p_max_attempts INTEGER[], p_retention_ms BIGINT[], p_tags TEXT[], p_sticky_worker TEXT[],
    p_headers TEXT[], p_periodic_schedule_id TEXT[], p_periodic_tick_ms BIGINT[],
    p_pending BOOLEAN[],
    -- The effective unique key (kind-scoped or not, as the client derives it), NULL for
    -- none; its window, replace bits and debounce.
    p_unique_key BYTEA[], p_unique_window_ms BIGINT[], p_unique_replace INTEGER[],
    p_unique_debounce_ms BIGINT[], p_origin TEXT,
    OUT outcome TEXT, OUT subject TEXT, OUT queue_limit BIGINT, OUT current BIGINT,
    OUT incoming BIGINT, OUT received_queues TEXT[], OUT duplicate_id TEXT,
    OUT replaced BOOLEAN, OUT inserted INTEGER
) LANGUAGE plpgsql
-- Custom plans would be re-planned on every call (their array arguments make the
-- generic plan look dearer); planning cost more than running. A generic plan is made
-- once per session, often while jobs is still small: no sequential scans, or the id
-- probe stays a scan of the whole table as it grows (O(n) per enqueue).
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    -- The store clock, as the shared code reads it at the start of its transaction.
    now_ms BIGINT := headgate_now_ms();
    n INTEGER := cardinality(p_id);
    keyed BOOLEAN := p_unique_key[1] IS NOT NULL OR cardinality(p_unique_key) > 1;
    existing TEXT[];
    missing BOOLEAN;  -- a queue has no row yet
    limited BOOLEAN;  -- a queue has an enqueue limit
    holder_state TEXT;
    sent BIGINT;      -- NOTIFYs sent: 1, or 0 without an origin
BEGIN
    outcome := 'ok';
    replaced := false;
    inserted := 0;
    IF n > 1 THEN
        SELECT headgate_widen(p_kind, n), headgate_widen(p_schema_version, n),
               headgate_widen(p_payload, n), headgate_widen(p_fingerprint, n),
               headgate_widen(p_queue, n), headgate_widen(p_priority, n),
               headgate_widen(p_partition_key, n), headgate_widen(p_rate_class, n),
               headgate_widen(p_weight, n), headgate_widen(p_scheduled_at_ms, n),
               headgate_widen(p_max_attempts, n), headgate_widen(p_retention_ms, n),
               headgate_widen(p_tags, n), headgate_widen(p_sticky_worker, n),
               headgate_widen(p_headers, n), headgate_widen(p_periodic_schedule_id, n),
               headgate_widen(p_periodic_tick_ms, n), headgate_widen(p_pending, n),
               headgate_widen(p_unique_key, n), headgate_widen(p_unique_window_ms, n),
               headgate_widen(p_unique_replace, n), headgate_widen(p_unique_debounce_ms, n)
        INTO p_kind, p_schema_version, p_payload, p_fingerprint, p_queue, p_priority,
             p_partition_key, p_rate_class, p_weight, p_scheduled_at_ms, p_max_attempts,
             p_retention_ms, p_tags, p_sticky_worker, p_headers, p_periodic_schedule_id,
             p_periodic_tick_ms, p_pending, p_unique_key, p_unique_window_ms,
             p_unique_replace, p_unique_debounce_ms;
        received_queues := ARRAY(SELECT DISTINCT b.queue COLLATE "C"
                                 FROM unnest(p_queue) AS b(queue) ORDER BY 1);
    ELSE
        received_queues := p_queue;
    END IF;

    -- With unique keys, every lock comes first, in a statement of its own: the keys'
    -- (sorted), then the queues'. What the statements after it read (ids, quarantine,
    -- limits, a key's holder) is then what committed before this call held them.
    IF keyed THEN
        PERFORM count(pg_advisory_xact_lock(l.h))
        FROM (SELECT l.h FROM (
                  SELECT 1 AS grp, encode(u.key, 'hex') AS name,
                         hashtextextended(encode(u.key, 'hex'), headgate_key_lock_seed()) AS h
                  FROM unnest(p_unique_key) AS u(key) WHERE u.key IS NOT NULL
                  UNION
                  SELECT 2, u.name, headgate_queue_lock_key_v1(u.name)
                  FROM unnest(received_queues) AS u(name)) AS l
              ORDER BY l.grp, l.name COLLATE "C") AS l;
    END IF;

    -- Queue locks before any counter row, in the order every job-state transaction takes
    -- them: admission and acks update queue_counts and partitions too, and the
    -- backpressure read below sees counts no other writer is changing (taken again when
    -- held: advisory locks nest). In the same statement (without unique keys its snapshot
    -- is older than the queue locks: a quarantine, a limit or an id committed meanwhile
    -- counts from the next enqueue on): which ids exist, and the enqueue gate of
    -- checks.sql, which the plain statement and COPY batches call too: the first
    -- quarantined fingerprint, and whether a queue row is missing or limits enqueues
    -- (else two statements are skipped).
    SELECT ARRAY(SELECT j.id FROM jobs j WHERE j.id = ANY(p_id)),
           gate.quarantined, gate.missing, gate.limited
    INTO existing, subject, missing, limited
    FROM (SELECT count(headgate_lock_queue_v1(u.name))
          FROM unnest(received_queues) AS u(name)) AS locked,
         headgate_enqueue_gate_v1(received_queues, p_fingerprint) AS gate;

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
               array_agg(b.pending ORDER BY b.ord), array_agg(b.unique_key ORDER BY b.ord),
               array_agg(b.unique_window_ms ORDER BY b.ord),
               array_agg(b.unique_replace ORDER BY b.ord),
               array_agg(b.unique_debounce_ms ORDER BY b.ord)
        INTO p_id, p_kind, p_schema_version, p_payload, p_fingerprint, p_queue, p_priority,
             p_partition_key, p_rate_class, p_weight, p_scheduled_at_ms, p_max_attempts,
             p_retention_ms, p_tags, p_sticky_worker, p_headers, p_periodic_schedule_id,
             p_periodic_tick_ms, p_pending, p_unique_key, p_unique_window_ms,
             p_unique_replace, p_unique_debounce_ms
        FROM unnest(p_id, p_kind, p_schema_version, p_payload, p_fingerprint, p_queue,
                    p_priority, p_partition_key, p_rate_class, p_weight, p_scheduled_at_ms,
                    p_max_attempts, p_retention_ms, p_tags, p_sticky_worker, p_headers,
                    p_periodic_schedule_id, p_periodic_tick_ms, p_pending, p_unique_key,
                    p_unique_window_ms, p_unique_replace, p_unique_debounce_ms)
             WITH ORDINALITY
             AS b(id, kind, schema_version, payload, fingerprint, queue, priority,
                  partition_key, rate_class, weight, scheduled_at_ms, max_attempts,
                  retention_ms, tags, sticky_worker, headers, periodic_schedule_id,
                  periodic_tick_ms, pending, unique_key, unique_window_ms, unique_replace,
                  unique_debounce_ms, ord)
        WHERE b.id <> ALL (existing);
        IF p_id IS NULL THEN
            received_queues := '{}';
            RETURN;
        END IF;
        received_queues := ARRAY(SELECT DISTINCT b.queue COLLATE "C"
                                 FROM unnest(p_queue) AS b(queue) ORDER BY 1);
        SELECT gate.quarantined, gate.missing, gate.limited INTO subject, missing, limited
        FROM headgate_enqueue_gate_v1(received_queues, p_fingerprint) AS gate;
    END IF;

    IF subject IS NOT NULL THEN
        outcome := 'quarantined';
        received_queues := '{}';
        RETURN;
    END IF;

    -- Unique keys, in batch order: the first envelope whose key an earlier one named, or
    -- whose key is held, decides. A key is held until its window ends, or, without a
    -- window, while its holder is unfinished. The holder's row is locked: admission must
    -- not start it between this read and its replacement.
    IF keyed THEN
        SELECT CASE WHEN k.earlier THEN 'repeated_key' ELSE 'duplicate' END,
               u.job_id, h.state
        INTO outcome, duplicate_id, holder_state
        FROM (SELECT b.key, b.ord,
                     count(*) OVER (PARTITION BY b.key ORDER BY b.ord) > 1 AS earlier
              FROM unnest(p_unique_key) WITH ORDINALITY AS b(key, ord)
              WHERE b.key IS NOT NULL) AS k
        LEFT JOIN uniques u ON u.key = k.key AND NOT k.earlier
        LEFT JOIN LATERAL (SELECT j.state FROM jobs j WHERE j.id = u.job_id
                           FOR UPDATE) AS h ON true
        WHERE k.earlier
           OR (u.expires_at_ms IS NOT NULL AND now_ms < u.expires_at_ms)
           OR (u.key IS NOT NULL AND u.expires_at_ms IS NULL
               AND h.state IN ('pending', 'scheduled', 'available', 'running', 'retryable'))
        ORDER BY k.ord LIMIT 1;
        IF NOT FOUND THEN
            outcome := 'ok';
        ELSE
            received_queues := '{}';
            IF outcome = 'duplicate' AND n = 1
               AND holder_state IN ('pending', 'scheduled', 'available', 'retryable') THEN
                replaced := headgate_replace_holder_v1(duplicate_id, holder_state, now_ms,
                    p_payload[1], p_fingerprint[1], p_schema_version[1], p_tags[1],
                    p_headers[1], p_scheduled_at_ms[1], p_priority[1], p_max_attempts[1],
                    p_unique_replace[1], p_unique_debounce_ms[1]);
            END IF;
            RETURN;
        END IF;
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

    IF keyed THEN
        -- Each key now names its new job; a debounced one is due no sooner than the
        -- debounce from now.
        INSERT INTO uniques (key, job_id, expires_at_ms)
        SELECT b.key, b.id,
               CASE WHEN b.window_ms > 0 THEN now_ms + b.window_ms END
        FROM unnest(p_unique_key, p_id, p_unique_window_ms) AS b(key, id, window_ms)
        WHERE b.key IS NOT NULL
        ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id,
                                        expires_at_ms = excluded.expires_at_ms;
        p_scheduled_at_ms := ARRAY(
            SELECT CASE WHEN b.key IS NOT NULL AND b.debounce_ms > 0
                        THEN greatest(coalesce(nullif(b.scheduled_at_ms, 0), now_ms),
                                      now_ms + b.debounce_ms)
                        ELSE b.scheduled_at_ms END
            FROM unnest(p_unique_key, p_unique_debounce_ms, p_scheduled_at_ms)
                 WITH ORDINALITY AS b(key, debounce_ms, scheduled_at_ms, ord)
            ORDER BY b.ord);
    END IF;

    IF missing THEN
        INSERT INTO queues (name, created_at_ms)
        SELECT u.name, now_ms FROM unnest(received_queues) AS u(name)
        ON CONFLICT (name) DO NOTHING;
    END IF;
    inserted := cardinality(p_id);

    -- ORDER BY: rowid is arrival order, and a batch arrives in its own order.
    WITH new_jobs AS (
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
        RETURNING 1
    )
    SELECT count(headgate_wake_v1(p_origin, received_queues)) INTO sent
    FROM (SELECT count(*) FROM new_jobs) AS written;
END $$;

-- A duplicate enqueue's replacements on its key's holder, which is waiting (pending,
-- scheduled, available or retryable) and row-locked by the caller. Debounce takes the
-- new payload (and tags) and, where a due time is waited for, moves it to the debounce
-- from now; the replace bits take the payload (and headers), the due time (where one
-- is waited for, pending included), the priority or the attempt limit. Returns whether
-- anything was written.
CREATE OR REPLACE FUNCTION headgate_replace_holder_v1(
    p_holder TEXT, p_state TEXT, p_now_ms BIGINT, p_payload BYTEA, p_fingerprint TEXT,
    p_schema_version INTEGER, p_tags TEXT, p_headers TEXT, p_scheduled_at_ms BIGINT,
    p_priority INTEGER, p_max_attempts INTEGER, p_replace INTEGER, p_debounce_ms BIGINT
) RETURNS BOOLEAN LANGUAGE sql AS $$
    WITH wanted AS (
        SELECT p_debounce_ms > 0 AS debounce,
               p_replace & headgate_replace_payload() <> 0 AS payload,
               p_replace & headgate_replace_scheduled_at() <> 0
                   AND p_state IN ('scheduled', 'retryable', 'pending') AS due,
               p_debounce_ms > 0 AND p_state IN ('scheduled', 'retryable') AS debounce_due,
               p_replace & headgate_replace_priority() <> 0 AS priority,
               p_replace & headgate_replace_max_attempts() <> 0 AS max_attempts
    ), changed AS (
        UPDATE jobs j SET
            payload = CASE WHEN w.debounce OR w.payload THEN p_payload ELSE j.payload END,
            fingerprint = CASE WHEN w.debounce OR w.payload THEN p_fingerprint
                               ELSE j.fingerprint END,
            schema_version = CASE WHEN w.debounce OR w.payload THEN p_schema_version
                                  ELSE j.schema_version END,
            tags = CASE WHEN w.debounce THEN p_tags ELSE j.tags END,
            headers = CASE WHEN w.payload THEN p_headers ELSE j.headers END,
            scheduled_at_ms = CASE WHEN w.due THEN coalesce(nullif(p_scheduled_at_ms, 0),
                                                            p_now_ms)
                                   WHEN w.debounce_due THEN p_now_ms + p_debounce_ms
                                   ELSE j.scheduled_at_ms END,
            priority = CASE WHEN w.priority THEN p_priority ELSE j.priority END,
            max_attempts = CASE WHEN w.max_attempts THEN p_max_attempts
                                ELSE j.max_attempts END
        FROM wanted w
        WHERE j.id = p_holder
          AND (w.debounce OR w.payload OR w.due OR w.priority OR w.max_attempts)
        RETURNING 1
    )
    SELECT count(*) > 0 FROM changed
$$;
