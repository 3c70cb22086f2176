-- The checks PostgreSQL's enqueue statements share, each written once here and called by
-- the plain statement (headgate/adapters/postgres/enqueue.py), the COPY batch
-- (postgres/bulk.py) and headgate_enqueue_v3 alike. Each is a SQL function the planner
-- inlines into its caller, as headgate_admitted_row is: one SELECT, no SET clause, not
-- STRICT; a scalar one is a single expression, a table one is STABLE and called in FROM.
-- The calling statement's plan is then the plan of the text it replaced: no function
-- scan, no call. (A function that is not inlined would be planned again in every
-- statement that calls it.)

-- The key of a queue's advisory lock: every enqueue, admission and job-state change of
-- the queue takes it (transaction-scoped), in code point order when it takes several.
-- Before the first, the transaction takes the counters lock shared (counters.sql): a new
-- counter generation waits for the transactions that may still write counts.
CREATE OR REPLACE FUNCTION headgate_queue_lock_key_v1(p_queue TEXT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended(p_queue, headgate_queue_lock_seed())
$$;

-- One expression (the CASE orders the two calls), so that the planner inlines it: a body
-- with a FROM clause is planned again inside every statement that calls it.
CREATE OR REPLACE FUNCTION headgate_lock_queue_v1(p_queue TEXT) RETURNS VOID
LANGUAGE sql AS $$
    SELECT CASE WHEN pg_advisory_xact_lock_shared(headgate_counters_lock_key())::text = ''
                THEN pg_advisory_xact_lock(headgate_queue_lock_key_v1(p_queue)) END
$$;

-- The enqueue gate of distinct queues `p_queues` receiving jobs with `p_fingerprints`:
-- the first quarantined fingerprint (code point order), whether a queue has no row yet
-- (missing) and whether one limits enqueues (limited). `plain`: none of them, so an
-- enqueue without unique keys has nothing to decide but the insert (the statements that
-- insert without the function require it; the function reads the three to decide).
CREATE OR REPLACE FUNCTION headgate_enqueue_gate_v1(p_queues TEXT[], p_fingerprints TEXT[])
RETURNS TABLE (plain BOOLEAN, quarantined TEXT, missing BOOLEAN, limited BOOLEAN)
LANGUAGE sql STABLE AS $$
    SELECT g.quarantined IS NULL AND NOT g.missing AND NOT g.limited,
           g.quarantined, g.missing, g.limited
    FROM (SELECT (SELECT min(f.fingerprint) FROM quarantine f
                  WHERE f.fingerprint = ANY(p_fingerprints)) AS quarantined,
                 count(*) < cardinality(p_queues) AS missing,
                 coalesce(bool_or(q.max_unfinished_jobs IS NOT NULL), false) AS limited
          FROM queues q WHERE q.name = ANY(p_queues)) AS g
$$;

-- The wake-up NOTIFY after an enqueue, sent with the COMMIT (PostgreSQL delivers it only
-- then), none without an origin: the payload of headgate/adapters/postgres/notify.py
-- decode(), the origin, then `p_queues` (code point order) joined by U+001F, or none
-- ("something changed") when that is long.
CREATE OR REPLACE FUNCTION headgate_wake_v1(p_origin TEXT, p_queues TEXT[]) RETURNS VOID
LANGUAGE sql AS $$
    SELECT CASE WHEN p_origin IS NOT NULL THEN pg_notify('headgate', p_origin || '|' ||
        CASE WHEN length(array_to_string(p_queues, chr(31)))
                  < headgate_notify_queues_max_chars()
             THEN array_to_string(p_queues, chr(31)) ELSE '' END) END
$$;
