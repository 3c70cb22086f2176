-- headgate_admit_v3: PostgreSQL's admission decision, with a worker's plain successful
-- acks, in one server-side call, so "finish a few, take a few" is one statement (one
-- round trip) instead of ~15-20. It makes the same decision as
-- headgate/adapters/sqlite/admission.py's admit() (SQLite's), in the same lock order;
-- headgate/adapters/postgres/admission.py calls it.
--
-- A queue's partitions are read a page at a time: they are counted up to the wanted
-- count (all the quantum needs), then the first round is read lazily in rotation order
-- (those after the cursor, then from the start up to it), and later rounds revisit only
-- partitions already read, so a queue with thousands of tenants does not pay for all of
-- them to admit two jobs. Statements with nothing to do are skipped (each costs executor
-- start-up, ~0.1 ms on a backend that sat idle). Lost acks are found by EXCEPT and the
-- kept acks' results carried from the read, not tested ack by ack against the batch.
-- Keys are ordered and compared in the column's collation (C on a --no-locale cluster,
-- as SQLite's code point order).
--
-- The composite types are created once; a changed shape gets a new name (as the
-- function does), so code of the previous release keeps working during an upgrade.

-- A candidate row of the light scan (payloads are read only for claimed rows).
DO $$ BEGIN
CREATE TYPE headgate_candidate AS (
    rowid BIGINT, id TEXT, priority INTEGER, fingerprint TEXT, rate_class TEXT,
    weight BIGINT, sticky_worker TEXT
);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- One row of headgate_admit(): a lost ack (lost_id set, the rest NULL) or a claimed job
-- (lost_id NULL; rows.JOB_FIELDS then payload, the order rows.row_to_job reads).
DO $$ BEGIN
CREATE TYPE headgate_admitted AS (
    lost_id TEXT,
    id TEXT, kind TEXT, queue TEXT, state TEXT, schema_version INTEGER, priority INTEGER,
    partition_key TEXT, rate_class TEXT, weight BIGINT, fingerprint TEXT,
    scheduled_at_ms BIGINT, max_attempts INTEGER, retention_ms BIGINT, tags TEXT,
    sticky_worker TEXT, headers TEXT, attempt INTEGER, crash_attempt INTEGER, fence BIGINT,
    lease_id TEXT, lease_expires_at_ms BIGINT, worker_id TEXT, enqueued_at_ms BIGINT,
    attempted_at_ms BIGINT, finalized_at_ms BIGINT, errors TEXT,
    periodic_schedule_id TEXT, periodic_tick_ms BIGINT, cancel_requested INTEGER,
    was_pending INTEGER, payload BYTEA
);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- A claimed job as a headgate_admitted row: the one place the function's output lists the
-- job's columns (both of its paths return through it). A single-expression SQL function,
-- so the planner inlines it: a call costs what the column list did.
CREATE OR REPLACE FUNCTION headgate_admitted_row(j jobs) RETURNS headgate_admitted
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ROW(NULL::text, (j).id, (j).kind, (j).queue, (j).state, (j).schema_version,
               (j).priority, (j).partition_key, (j).rate_class, (j).weight, (j).fingerprint,
               (j).scheduled_at_ms, (j).max_attempts, (j).retention_ms, (j).tags,
               (j).sticky_worker, (j).headers, (j).attempt, (j).crash_attempt, (j).fence,
               (j).lease_id, (j).lease_expires_at_ms, (j).worker_id, (j).enqueued_at_ms,
               (j).attempted_at_ms, (j).finalized_at_ms, (j).errors,
               (j).periodic_schedule_id, (j).periodic_tick_ms, (j).cancel_requested,
               (j).was_pending, (j).payload)::headgate_admitted
$$;

-- The admission checks, each written once and called by the early exit, the policy block
-- and headgate_explain_v1 (explain_admission's dry run of this admission): SQL functions
-- the planner inlines (checks.sql says when), in PL/pgSQL's simple expressions too.

-- A scheduled or retryable job whose time has come: admission makes it available first.
CREATE OR REPLACE FUNCTION headgate_due_v1(p_state TEXT, p_scheduled_at_ms BIGINT,
                                           p_now BIGINT) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_state IN ('scheduled', 'retryable') AND p_scheduled_at_ms <= p_now
$$;

-- A job sticky to another worker than p_worker: only that one may run it.
CREATE OR REPLACE FUNCTION headgate_sticky_elsewhere_v1(p_sticky TEXT, p_worker TEXT)
RETURNS BOOLEAN LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_sticky <> '' AND p_sticky <> p_worker
$$;

-- A rate class's tokens at p_now (admission.RateBucket.load): refilled by store time up
-- to its burst; a clock that stepped back mints nothing.
CREATE OR REPLACE FUNCTION headgate_rate_tokens_v1(
    p_tokens FLOAT8, p_refilled_at_ms BIGINT, p_limit BIGINT, p_window_ms BIGINT,
    p_burst BIGINT, p_now BIGINT
) RETURNS FLOAT8 LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(p_burst::float8,
                 p_tokens + (greatest(0, p_now - p_refilled_at_ms)::numeric * p_limit)::float8
                            / p_window_ms::float8)
$$;

-- "No policy has a say" on admitting from p_queue: the queue's row when it is open (not
-- paused), nothing is quarantined and no concurrency limit is set on it. With no job of
-- it due (headgate_due_v1, tested by the caller against its own clock: as an argument
-- here it would make the test a SubPlan) the early exit admits; otherwise each of these
-- is the policy block's to apply.
CREATE OR REPLACE FUNCTION headgate_no_policy_v1(p_queue TEXT)
RETURNS SETOF queues LANGUAGE sql STABLE AS $$
    SELECT q.* FROM queues q
    WHERE q.name = p_queue AND q.paused = 0
      AND NOT EXISTS (SELECT 1 FROM quarantine)
      AND NOT EXISTS (SELECT 1 FROM concurrency_limits c WHERE c.queue = p_queue)
$$;

-- The next candidates of one partition in admission order (priority DESC, rowid) from a
-- position: (p_priority, p_rowid) included when p_inclusive (a scan fence), else after
-- it (a scan resumed); p_priority NULL: from the start. Two index ranges, the position's
-- priority from its rowid and then the lower priorities, not one condition with OR,
-- which the index could only filter: entries before the position are never walked.
CREATE OR REPLACE FUNCTION headgate_candidates_v1(
    p_queue TEXT, p_partition TEXT, p_priority INTEGER, p_rowid BIGINT,
    p_inclusive BOOLEAN, p_limit BIGINT
) RETURNS headgate_candidate[] LANGUAGE plpgsql AS $$
DECLARE
    v_same headgate_candidate[] := '{}';
    v_below headgate_candidate[];
BEGIN
    IF p_priority IS NOT NULL THEN
        SELECT coalesce(array_agg(ROW(j.rowid, j.id, j.priority, j.fingerprint, j.rate_class,
                                      j.weight, j.sticky_worker)::headgate_candidate
                                  ORDER BY j.rowid), '{}')
        INTO v_same
        FROM (SELECT rowid, id, priority, fingerprint, rate_class, weight, sticky_worker
              FROM jobs
              WHERE queue = p_queue AND partition_key = p_partition AND state = 'available'
                AND priority = p_priority
                AND rowid >= p_rowid + CASE WHEN p_inclusive THEN 0 ELSE 1 END
              ORDER BY priority DESC, rowid LIMIT p_limit
              FOR UPDATE SKIP LOCKED) AS j;
        IF cardinality(v_same) >= p_limit THEN
            RETURN v_same;
        END IF;
    END IF;
    SELECT coalesce(array_agg(ROW(j.rowid, j.id, j.priority, j.fingerprint, j.rate_class,
                                  j.weight, j.sticky_worker)::headgate_candidate
                              ORDER BY j.priority DESC, j.rowid), '{}')
    INTO v_below
    FROM (SELECT rowid, id, priority, fingerprint, rate_class, weight, sticky_worker
          FROM jobs
          WHERE queue = p_queue AND partition_key = p_partition AND state = 'available'
            AND priority < coalesce(p_priority::bigint, 2147483648)
          ORDER BY priority DESC, rowid LIMIT p_limit - cardinality(v_same)
          FOR UPDATE SKIP LOCKED) AS j;
    RETURN v_same || v_below;
END $$;

-- lifecycle.ack_many of plain successes (no error, no logs, no delay: running →
-- completed, or deleted with retention 0; "completed" in queue history), then
-- admission.admit(). p_ack_* are empty for a bare admit; p_queues empty and capacity 0
-- for acks alone. p_now is NULL except when the caller already applied other acks in
-- this transaction at its own store time. Returns the lost acks (id order), then the
-- claims in the order they were decided. p_try_plain: try the early exit below first.
-- p_max_scan, p_scan_extra and p_promote_limit are the caller's constants
-- (admission.MAX_SCAN_PER_PARTITION, SCAN_BATCH_EXTRA, PROMOTE_PER_ADMIT), the same
-- numbers SQLite's admission uses, passed rather than retyped here.
-- Generic plans: re-planning every statement on every call cost more than running it.
-- A generic plan is made once per session, often while jobs is still small, so no
-- sequential scans (and job rows are always looked up by `id = ANY(...)`), or a plan
-- made then would scan the whole table once it has grown.
CREATE OR REPLACE FUNCTION headgate_admit_v3(
    p_worker TEXT, p_queues TEXT[], p_capacity BIGINT, p_lease_ms BIGINT,
    p_quantum BIGINT, p_lease_id TEXT, p_now BIGINT, p_ack_queues TEXT[],
    p_ack_ids TEXT[], p_ack_leases TEXT[], p_ack_fences BIGINT[], p_ack_results BYTEA[],
    p_ack_versions INTEGER[], p_try_plain BOOLEAN, p_max_scan INTEGER,
    p_scan_extra INTEGER, p_promote_limit INTEGER
) RETURNS SETOF headgate_admitted
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    v_out headgate_admitted;
    v_plain BOOLEAN := false;
BEGIN
    -- The early exit: an admit from one queue where no policy has a say (the queue
    -- open, no quarantine, no ceiling on it, no due job to promote, at most one partition
    -- waiting and its round-robin state settled, candidates without a rate class or
    -- another worker's stickiness), with any plain acks of that queue's jobs (a draining
    -- worker's steady state), is "complete the acked jobs, claim the first p_capacity
    -- available jobs in (priority, arrival) order", done by this one statement; the
    -- policy block below, whose declarations alone cost a woken backend more than this
    -- statement, is not entered. The statement's snapshot predates the queue lock it
    -- takes, so a pause, ceiling, quarantine or enqueue committed while it waited applies
    -- from the next admit on (the claims are what an admit just before that commit would
    -- have made; the row locks re-check each candidate's state and each acked job's
    -- lease). When a policy had a say, or an ack is lost or deletes its job (retention
    -- 0), it changes nothing, returns one row with lost_id '' (the caller then skips
    -- this check for a while: p_try_plain) and the policy block decides.
    IF p_try_plain AND p_quantum IS NULL AND p_capacity > 0 AND cardinality(p_queues) = 1
       AND p_now IS NULL AND p_queues[1] = ALL(p_ack_queues) THEN
        FOR v_out IN
            WITH clock AS MATERIALIZED (
                SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms,
                       headgate_lock_queue_v1(p_queues[1]) AS locked
            ), acked AS MATERIALIZED (
                -- After the queue lock (the one-time filter), rows locked in id order, as
                -- the policy block's acks; its state checked on the row read (see there).
                SELECT j.id, j.state = 'running' AND j.retention_ms > 0 AS kept, a.result,
                       a.version
                FROM (SELECT * FROM unnest(p_ack_ids, p_ack_leases, p_ack_fences,
                                           p_ack_results, p_ack_versions)
                      WHERE (SELECT now_ms FROM clock) IS NOT NULL)
                    AS a(id, lease_id, fence, result, version)
                JOIN jobs j ON j.id = a.id
                WHERE j.lease_id = a.lease_id AND j.fence = a.fence
                ORDER BY j.id FOR UPDATE OF j
            ), open_queue AS MATERIALIZED (
                SELECT q.rr_cursor FROM headgate_no_policy_v1(p_queues[1]) q, clock
                WHERE NOT EXISTS (SELECT 1 FROM jobs
                                  WHERE headgate_due_v1(state, scheduled_at_ms, clock.now_ms)
                                    AND queue = p_queues[1])
            ), waiting AS MATERIALIZED (
                SELECT partition_key, deficit, scan_priority, scan_rowid FROM partitions
                WHERE queue = p_queues[1] AND waiting > 0 AND EXISTS (SELECT 1 FROM open_queue)
                LIMIT 2
            ), served AS MATERIALIZED (
                SELECT w.partition_key, w.scan_priority, w.scan_rowid FROM waiting w, open_queue q
                WHERE (SELECT count(*) FROM waiting) = 1 AND w.deficit = 0
                  AND q.rr_cursor IS NOT DISTINCT FROM w.partition_key
            ), fenced AS MATERIALIZED (
                -- From the partition's scan fence on (0025_partition_scan_fence.sql): its
                -- own priority from its rowid, then the lower priorities; each an index
                -- range, so entries of jobs claimed before the fence are never walked.
                SELECT id, rate_class, sticky_worker, priority, rowid FROM jobs
                WHERE queue = p_queues[1] AND partition_key = (SELECT partition_key FROM served)
                  AND state = 'available' AND priority = (SELECT scan_priority FROM served)
                  AND rowid >= (SELECT scan_rowid FROM served)
                ORDER BY priority DESC, rowid LIMIT p_capacity
                FOR UPDATE SKIP LOCKED
            ), below AS MATERIALIZED (
                SELECT id, rate_class, sticky_worker, priority, rowid FROM jobs
                WHERE queue = p_queues[1] AND partition_key = (SELECT partition_key FROM served)
                  AND state = 'available'
                  AND priority < coalesce((SELECT scan_priority FROM served)::bigint, 2147483648)
                ORDER BY priority DESC, rowid LIMIT p_capacity - (SELECT count(*) FROM fenced)
                FOR UPDATE SKIP LOCKED
            ), candidates AS MATERIALIZED (
                SELECT * FROM fenced UNION ALL SELECT * FROM below
            ), decided AS MATERIALIZED (
                SELECT EXISTS (SELECT 1 FROM open_queue)
                       AND ((SELECT count(*) FROM waiting) = 0 OR EXISTS (SELECT 1 FROM served))
                       AND NOT EXISTS (SELECT 1 FROM candidates
                                       WHERE rate_class <> ''
                                          OR headgate_sticky_elsewhere_v1(sticky_worker, p_worker))
                       AND (SELECT count(*) FILTER (WHERE kept) FROM acked)
                           = cardinality(p_ack_ids) AS plain
            ), completed AS (
                -- The acked rows, each on its own (no join): the rows this statement's
                -- snapshot shows may predate a renewal that committed before the lock
                -- above, and an UPDATE joined to the acks can miss such a row when it
                -- re-reads it; the id list alone re-finds every one.
                UPDATE jobs SET state = 'completed', lease_id = NULL,
                    lease_expires_at_ms = NULL,
                    finalized_at_ms = (SELECT now_ms FROM clock),
                    expires_at_ms = (SELECT now_ms FROM clock) + retention_ms,
                    (result, result_schema_version) = (
                        SELECT COALESCE(k.result, jobs.result),
                               CASE WHEN k.result IS NULL THEN jobs.result_schema_version
                                    ELSE k.version END
                        FROM acked k WHERE k.id = jobs.id)
                WHERE id = ANY(ARRAY(SELECT id FROM acked)) AND (SELECT plain FROM decided)
            ), claimed AS (
                -- By id alone: the candidates are locked above as available, so a state
                -- test adds nothing, and with one the generic plan (made while jobs was
                -- small) read every available row through jobs_available_age.
                UPDATE jobs SET state = 'running', fence = fence + 1, lease_id = p_lease_id,
                    lease_expires_at_ms = (SELECT now_ms FROM clock) + p_lease_ms,
                    worker_id = p_worker, attempted_at_ms = (SELECT now_ms FROM clock),
                    cancel_requested = 0
                WHERE id = ANY(ARRAY(SELECT id FROM candidates)) AND (SELECT plain FROM decided)
                RETURNING jobs AS j
            ), moved AS (
                -- The fence forward to the first job claimed, once it has fallen a few
                -- hundred rows behind: one write of the partition row per that many claims.
                UPDATE partitions SET scan_priority = f.priority, scan_rowid = f.rowid
                FROM (SELECT priority, rowid FROM candidates
                      ORDER BY priority DESC, rowid LIMIT 1) AS f, served s
                WHERE partitions.queue = p_queues[1]
                  AND partitions.partition_key = s.partition_key
                  AND (SELECT plain FROM decided)
                  AND (s.scan_rowid IS NULL OR f.priority < s.scan_priority
                       OR f.rowid - s.scan_rowid > headgate_scan_fence_slack())
            ), history AS (
                -- rows.bump_history: the completions, one row for the queue
                INSERT INTO queue_history (queue, bucket_ms, completed)
                SELECT p_queues[1], c.now_ms - c.now_ms % headgate_history_bucket_ms(),
                       cardinality(p_ack_ids)
                FROM clock c
                WHERE cardinality(p_ack_ids) > 0 AND (SELECT plain FROM decided)
                ON CONFLICT (queue, bucket_ms) DO UPDATE SET
                    completed = queue_history.completed + excluded.completed
            )
            (SELECT (headgate_admitted_row(c.j)).*
             FROM claimed c ORDER BY (c.j).priority DESC, (c.j).rowid)
            UNION ALL
            SELECT (jsonb_populate_record(NULL::headgate_admitted, '{"lost_id": ""}')).*
            FROM decided WHERE NOT decided.plain
        LOOP
            IF v_out.lost_id IS NULL THEN
                RETURN NEXT v_out;
            ELSE
                v_plain := true;
            END IF;
        END LOOP;
        IF NOT v_plain THEN
            RETURN;
        END IF;
        RETURN NEXT v_out;  -- the marker: a policy had its say
    END IF;

    <<policy>>
    DECLARE
        v_now BIGINT := coalesce(p_now, (extract(epoch from clock_timestamp()) * 1000)::bigint);
        v_lost TEXT;
        v_lock TEXT;
        -- acks applied: completed (their partitions' running counts are not yet lowered:
        -- the final UPDATE writes them with the claims) and deleted (retention 0)
        v_kept TEXT[] := '{}';
        v_kept_queues TEXT[] := '{}';
        v_kept_parts TEXT[] := '{}';
        v_kept_results BYTEA[] := '{}';
        v_kept_versions INTEGER[] := '{}';
        v_deleted TEXT[] := '{}';
        v_done_queues TEXT[] := '{}';
        v_names TEXT[];
        -- the caller's unpaused queues, in the caller's order
        v_active TEXT[];
        v_weights BIGINT[];
        v_loaded_cursors TEXT[];
        v_cursors TEXT[];
        v_shares BIGINT[];
        v_raw FLOAT8[];
        v_order INTEGER[];
        v_total BIGINT;
        v_leftover BIGINT;
        v_hungry INTEGER[] := '{}';
        v_any_quarantine BOOLEAN;
        v_remaining BIGINT;
        v_pass INTEGER := 1;
        v_step INTEGER := 0;
        v_qi INTEGER;
        v_queue TEXT;
        v_want BIGINT;
        v_got BIGINT;
        -- claims, in decision order
        v_claimed TEXT[] := '{}';
        -- deficit round robin state of every (queue, partition) seen: deficit now, as
        -- loaded, and the running count change not yet in the partition counters
        g_queue TEXT[] := '{}';
        g_key TEXT[] := '{}';
        g_deficit BIGINT[] := '{}';
        g_loaded BIGINT[] := '{}';
        g_delta BIGINT[] := '{}';
        -- the visited queue's partitions (waiting > 0), in the partition table's order
        part_key TEXT[];
        part_deficit BIGINT[];
        part_loaded BIGINT[];
        part_running BIGINT[];
        part_base BIGINT[];
        v_n INTEGER;
        -- the first round reads the queue's partitions a page at a time, in rotation order:
        -- phase 1 those after the cursor, phase 2 from the start up to it, then phase 3 (all
        -- read); first_round: v_active_parts not yet set, positions are read order
        v_page INTEGER;
        v_phase INTEGER;
        v_after TEXT;
        v_first_round BOOLEAN;
        v_i INTEGER;
        page_key TEXT[];
        page_deficit BIGINT[];
        page_running BIGINT[];
        v_quantum BIGINT;
        v_active_parts INTEGER[];
        v_still INTEGER[];
        v_pi INTEGER;
        v_left BIGINT;
        v_last TEXT;
        v_take BIGINT;
        v_took BIGINT;
        -- the visited queue's ceilings
        l_name TEXT[];
        l_max BIGINT[];
        l_strategy TEXT[];
        v_li INTEGER;
        v_verdict TEXT;
        v_oldest_id TEXT;
        -- candidate scan of one partition
        v_scanned INTEGER;
        v_batch BIGINT;
        v_after_priority INTEGER;
        v_after_rowid BIGINT;
        v_candidates headgate_candidate[];
        c headgate_candidate;
        v_fence_priority INTEGER;
        v_fence_rowid BIGINT;
        -- scan fences to move forward at the write-back (a partition may appear twice)
        fm_queue TEXT[] := '{}';
        fm_key TEXT[] := '{}';
        fm_priority INTEGER[] := '{}';
        fm_rowid BIGINT[] := '{}';
        -- rate buckets loaded (FOR UPDATE) on first use; r_found false: no such class
        r_name TEXT[] := '{}';
        r_found BOOLEAN[] := '{}';
        r_limit BIGINT[] := '{}';
        r_window BIGINT[] := '{}';
        r_paused BOOLEAN[] := '{}';
        r_tokens FLOAT8[] := '{}';
        r_dirty BOOLEAN[] := '{}';
        r_blocked BOOLEAN[] := '{}';
        v_ri INTEGER;
        v_rate RECORD;
        v_found BOOLEAN;
        v_write RECORD;
        -- quarantine verdicts per fingerprint
        f_fp TEXT[] := '{}';
        f_bad BOOLEAN[] := '{}';
        v_fi INTEGER;
        -- rejection counts per queue
        x_queue TEXT[] := '{}';
        x_rate BIGINT[] := '{}';
        x_limit BIGINT[] := '{}';
        x_quarantine BIGINT[] := '{}';
        v_xi INTEGER;
    BEGIN
        IF cardinality(p_queues) = 1 THEN
            v_names := p_queues;
        ELSE
            v_names := ARRAY(SELECT u FROM unnest(p_queues) WITH ORDINALITY AS t(u, i)
                             GROUP BY u ORDER BY min(i));
        END IF;
        -- First the queues' admission locks, in code point order like dialect.lock_queues
        -- (Python's sorted()): one order with the shared lifecycle (lifecycle.lock_job_queues).
        FOR v_lock IN
            SELECT DISTINCT u COLLATE "C" FROM unnest(v_names || p_ack_queues) AS u ORDER BY 1
        LOOP
            PERFORM headgate_lock_queue_v1(v_lock);
        END LOOP;

        -- lifecycle.ack_many for plain successes: rows locked in id order; an ack whose job
        -- is no longer running under its lease and fence changes nothing and is lost.
        IF cardinality(p_ack_ids) > 0 THEN
            SELECT coalesce(array_agg(h.id) FILTER (WHERE h.running AND h.retention_ms > 0), '{}'),
                   coalesce(array_agg(h.queue) FILTER (WHERE h.running AND h.retention_ms > 0),
                            '{}'),
                   coalesce(array_agg(h.partition_key)
                            FILTER (WHERE h.running AND h.retention_ms > 0), '{}'),
                   coalesce(array_agg(h.result) FILTER (WHERE h.running AND h.retention_ms > 0),
                            '{}'),
                   coalesce(array_agg(h.version) FILTER (WHERE h.running AND h.retention_ms > 0),
                            '{}'),
                   coalesce(array_agg(h.id) FILTER (WHERE h.running AND h.retention_ms = 0), '{}'),
                   coalesce(array_agg(h.queue) FILTER (WHERE h.running), '{}')
            INTO v_kept, v_kept_queues, v_kept_parts, v_kept_results, v_kept_versions,
                 v_deleted, v_done_queues
            FROM (
                -- Joined from the acks by primary key (filtering jobs by `id = ANY(acks)`
                -- tested the whole batch for every running job the plan walked). No state
                -- predicate here: with one, a plan made while jobs was
                -- small read every running job through jobs_running. A row still under its
                -- lease and fence is running; the state is checked on the rows read (in the
                -- aggregates: a WHERE would be pushed down into this subquery).
                SELECT j.id, j.state = 'running' AS running, j.retention_ms, j.queue,
                       j.partition_key, a.result, a.version
                FROM unnest(p_ack_ids, p_ack_leases, p_ack_fences, p_ack_results, p_ack_versions)
                    AS a(id, lease_id, fence, result, version)
                JOIN jobs j ON j.id = a.id
                WHERE j.lease_id = a.lease_id AND j.fence = a.fence
                ORDER BY j.id FOR UPDATE OF j
            ) AS h;
            FOR v_lost IN
                -- (EXCEPT: testing each ack against the kept array was O(acks²))
                SELECT lost.id FROM (
                    SELECT a.id FROM unnest(p_ack_ids) AS a(id)
                    EXCEPT SELECT d.id FROM unnest(v_kept || v_deleted) AS d(id)
                ) AS lost ORDER BY lost.id COLLATE "C"
            LOOP
                v_out.lost_id := v_lost;
                RETURN NEXT v_out;
            END LOOP;
            IF cardinality(v_deleted) > 0 THEN
                -- The deletion takes the counter rows of 'running' before the claims take
                -- those of 'available'; an enqueue takes 'available' first. Taking those
                -- first keeps one order (no deadlock with producers).
                PERFORM 1 FROM (SELECT 1 FROM queue_counts
                                WHERE queue = ANY(v_names) AND state = 'available'
                                ORDER BY queue, state FOR UPDATE) AS counters;
                DELETE FROM jobs WHERE id = ANY(v_deleted);
            END IF;
        END IF;

        <<admission>>
        BEGIN
            -- lifecycle.promote_due over the caller's queues: an index probe, then the update
            IF EXISTS (SELECT 1 FROM jobs WHERE headgate_due_v1(state, scheduled_at_ms, v_now)
                       AND queue = ANY(v_names)) THEN
                UPDATE jobs SET state = 'available'
                WHERE id IN (SELECT id FROM jobs WHERE headgate_due_v1(state, scheduled_at_ms, v_now)
                             AND queue = ANY(v_names)
                             ORDER BY scheduled_at_ms LIMIT p_promote_limit FOR UPDATE SKIP LOCKED)
                  AND headgate_due_v1(state, scheduled_at_ms, v_now);
            END IF;

            SELECT array_agg(q.name ORDER BY t.i), array_agg(q.weight ORDER BY t.i),
                   array_agg(q.rr_cursor ORDER BY t.i)
            INTO v_active, v_weights, v_loaded_cursors
            FROM queues q JOIN unnest(v_names) WITH ORDINALITY AS t(n, i) ON q.name = t.n
            WHERE q.name = ANY(v_names) AND q.paused = 0;
            IF v_active IS NULL OR p_capacity = 0 THEN
                EXIT admission;
            END IF;
            v_cursors := v_loaded_cursors;
            v_any_quarantine := EXISTS (SELECT 1 FROM quarantine);

            -- admission._weighted_shares, in the same float arithmetic: floors, then the
            -- leftover to the largest fractions (ties to the earlier queue)
            IF cardinality(v_active) = 1 THEN
                v_shares := ARRAY[p_capacity];
            ELSE
                SELECT sum(w) INTO v_total FROM unnest(v_weights) AS w;
                v_raw := ARRAY(SELECT (p_capacity * w)::float8 / v_total::float8
                               FROM unnest(v_weights) WITH ORDINALITY AS t(w, i) ORDER BY i);
                v_shares := ARRAY(SELECT floor(r)::bigint FROM unnest(v_raw) WITH ORDINALITY AS t(r, i)
                                  ORDER BY i);
                v_leftover := p_capacity - (SELECT sum(s) FROM unnest(v_shares) AS s);
                v_order := ARRAY(SELECT i::integer FROM unnest(v_raw) WITH ORDINALITY AS t(r, i)
                                 ORDER BY r - floor(r) DESC, i);
                FOR v_qi IN 1..v_leftover LOOP
                    v_shares[v_order[v_qi]] := v_shares[v_order[v_qi]] + 1;
                END LOOP;
            END IF;

            -- Each queue its share, then (work-conserving) what is left to the queues that
            -- took their whole share, a share of 0 included.
            v_remaining := p_capacity;
            LOOP
                v_step := v_step + 1;
                IF v_pass = 1 AND v_step > cardinality(v_active) THEN
                    v_pass := 2;
                    v_step := 1;
                END IF;
                IF v_pass = 1 THEN
                    v_qi := v_step;
                    v_want := least(v_shares[v_qi], v_remaining);
                ELSE
                    EXIT WHEN v_step > cardinality(v_hungry) OR v_remaining <= 0;
                    v_qi := v_hungry[v_step];
                    v_want := v_remaining;
                END IF;
                v_queue := v_active[v_qi];
                v_got := 0;

                -- admission._admit_queue: deficit round robin over the queue's partitions
                IF v_want > 0 THEN
                    -- base: the running count as the shared code reads it, after the acks
                    -- How many have waiting jobs, counted up to v_want: with as many partitions
                    -- as wanted jobs or more the quantum is 1 whatever their number.
                    SELECT count(*) INTO v_n
                    FROM (SELECT 1 FROM partitions WHERE queue = v_queue AND waiting > 0
                          LIMIT v_want) AS waiting;
                ELSE
                    v_n := 0;
                END IF;

                IF v_n > 0 THEN
                    SELECT coalesce(array_agg(name ORDER BY max_concurrent, name), '{}'),
                           coalesce(array_agg(max_concurrent ORDER BY max_concurrent, name), '{}'),
                           coalesce(array_agg(on_saturated ORDER BY max_concurrent, name), '{}')
                    INTO l_name, l_max, l_strategy
                    FROM concurrency_limits WHERE queue = v_queue;
                    v_xi := array_position(x_queue, v_queue);
                    IF v_xi IS NULL THEN
                        x_queue := x_queue || v_queue;
                        x_rate := x_rate || 0::bigint;
                        x_limit := x_limit || 0::bigint;
                        x_quarantine := x_quarantine || 0::bigint;
                        v_xi := cardinality(x_queue);
                    END IF;
                    v_quantum := coalesce(p_quantum, greatest(1, (v_want + v_n - 1) / v_n));
                    -- Resume after the partition served last, so ties rotate between calls. A
                    -- queue may have thousands of partitions and an admit visits a few: a page
                    -- holds about the visits that fill v_want when each gives its quantum.
                    v_page := (v_want + v_quantum - 1) / v_quantum + 4;
                    v_phase := 1;
                    v_after := v_cursors[v_qi];
                    part_key := '{}';
                    part_deficit := '{}';
                    part_loaded := '{}';
                    part_running := '{}';
                    part_base := '{}';
                    v_first_round := true;
                    v_left := v_want;
                    v_last := v_cursors[v_qi];
                    WHILE v_left > 0 LOOP
                        v_still := '{}';
                        v_i := 0;
                        LOOP
                            v_i := v_i + 1;
                            IF v_first_round THEN
                                WHILE v_i > cardinality(part_key) AND v_phase < 3 LOOP
                                    IF v_phase = 1 THEN
                                        SELECT coalesce(array_agg(p.partition_key ORDER BY p.partition_key), '{}'),
                                               coalesce(array_agg(p.deficit ORDER BY p.partition_key), '{}'),
                                               coalesce(array_agg(p.running ORDER BY p.partition_key), '{}')
                                        INTO page_key, page_deficit, page_running
                                        FROM (SELECT partition_key, deficit, running FROM partitions
                                              WHERE queue = v_queue AND waiting > 0
                                                AND partition_key > v_after
                                              ORDER BY partition_key LIMIT v_page) AS p;
                                    ELSIF v_after IS NULL THEN
                                        SELECT coalesce(array_agg(p.partition_key ORDER BY p.partition_key), '{}'),
                                               coalesce(array_agg(p.deficit ORDER BY p.partition_key), '{}'),
                                               coalesce(array_agg(p.running ORDER BY p.partition_key), '{}')
                                        INTO page_key, page_deficit, page_running
                                        FROM (SELECT partition_key, deficit, running FROM partitions
                                              WHERE queue = v_queue AND waiting > 0
                                                AND partition_key <= v_cursors[v_qi]
                                              ORDER BY partition_key LIMIT v_page) AS p;
                                    ELSE
                                        SELECT coalesce(array_agg(p.partition_key ORDER BY p.partition_key), '{}'),
                                               coalesce(array_agg(p.deficit ORDER BY p.partition_key), '{}'),
                                               coalesce(array_agg(p.running ORDER BY p.partition_key), '{}')
                                        INTO page_key, page_deficit, page_running
                                        FROM (SELECT partition_key, deficit, running FROM partitions
                                              WHERE queue = v_queue AND waiting > 0
                                                AND partition_key > v_after
                                                AND partition_key <= v_cursors[v_qi]
                                              ORDER BY partition_key LIMIT v_page) AS p;
                                    END IF;
                                    IF cardinality(page_key) < v_page THEN
                                        v_phase := v_phase + 1;
                                        v_after := NULL;
                                    ELSE
                                        v_after := page_key[v_page];
                                    END IF;
                                    IF v_queue <> ALL(g_queue) AND v_queue <> ALL(v_kept_queues) THEN
                                        -- no carried state and no acks here: the page as read
                                        part_key := part_key || page_key;
                                        part_deficit := part_deficit || page_deficit;
                                        part_loaded := part_loaded || page_deficit;
                                        part_running := part_running || page_running;
                                        part_base := part_base || page_running;
                                    ELSE
                                        -- base: the running count as the shared code reads it, after
                                        -- the acks; a second pass resumes this queue's state
                                        SELECT part_key || coalesce(array_agg(n.key ORDER BY n.i), '{}'),
                                               part_deficit || coalesce(array_agg(coalesce(g.deficit, n.deficit)
                                                                                  ORDER BY n.i), '{}'),
                                               part_loaded || coalesce(array_agg(coalesce(g.loaded, n.deficit)
                                                                                 ORDER BY n.i), '{}'),
                                               part_running || coalesce(array_agg(
                                                   n.running - coalesce(k.acked, 0) + coalesce(g.delta, 0)
                                                   ORDER BY n.i), '{}'),
                                               part_base || coalesce(array_agg(n.running - coalesce(k.acked, 0)
                                                                               ORDER BY n.i), '{}')
                                        INTO part_key, part_deficit, part_loaded, part_running, part_base
                                        FROM unnest(page_key, page_deficit, page_running) WITH ORDINALITY
                                            AS n(key, deficit, running, i)
                                        LEFT JOIN (
                                            SELECT s.key, s.deficit, s.loaded, s.delta
                                            FROM unnest(g_queue, g_key, g_deficit, g_loaded, g_delta)
                                                AS s(queue, key, deficit, loaded, delta)
                                            WHERE s.queue = v_queue
                                        ) AS g ON g.key = n.key LEFT JOIN (
                                            SELECT d.key, count(*) AS acked
                                            FROM unnest(v_kept_queues, v_kept_parts) AS d(queue, key)
                                            WHERE d.queue = v_queue GROUP BY d.key
                                        ) AS k ON k.key = n.key;
                                    END IF;
                                END LOOP;
                                EXIT WHEN v_i > cardinality(part_key);
                                v_pi := v_i;
                            ELSE
                                EXIT WHEN v_i > cardinality(v_active_parts);
                                v_pi := v_active_parts[v_i];
                            END IF;
                            part_deficit[v_pi] := part_deficit[v_pi] + v_quantum;
                            v_take := least(part_deficit[v_pi], v_left);

                            -- admission._take: light candidate scans in (priority, arrival)
                            -- order, each candidate through every policy
                            v_took := 0;
                            v_scanned := 0;
                            v_after_rowid := NULL;
                            SELECT scan_priority, scan_rowid INTO v_fence_priority, v_fence_rowid
                            FROM partitions
                            WHERE queue = v_queue AND partition_key = part_key[v_pi];
                            <<scan>>
                            WHILE v_took < v_take AND v_scanned < p_max_scan LOOP
                                -- First what is wanted, then room to skip: every row read
                                -- here is locked, one WAL record each (admission._take).
                                v_batch := v_take - v_took
                                           + CASE WHEN v_after_rowid IS NULL THEN 0
                                                  ELSE p_scan_extra END;
                                IF v_after_rowid IS NULL THEN
                                    -- from the partition's scan fence, moved forward at the
                                    -- write-back once the first candidate is well past it
                                    v_candidates := headgate_candidates_v1(
                                        v_queue, part_key[v_pi], v_fence_priority,
                                        v_fence_rowid, true, v_batch);
                                    IF cardinality(v_candidates) > 0
                                       AND (v_fence_rowid IS NULL
                                            OR v_candidates[1].priority < v_fence_priority
                                            OR v_candidates[1].rowid - v_fence_rowid
                                               > headgate_scan_fence_slack()) THEN
                                        fm_queue := fm_queue || v_queue;
                                        fm_key := fm_key || part_key[v_pi];
                                        fm_priority := fm_priority || v_candidates[1].priority;
                                        fm_rowid := fm_rowid || v_candidates[1].rowid;
                                    END IF;
                                ELSE
                                    v_candidates := headgate_candidates_v1(
                                        v_queue, part_key[v_pi], v_after_priority,
                                        v_after_rowid, false, v_batch);
                                END IF;
                                FOREACH c IN ARRAY v_candidates LOOP
                                    v_scanned := v_scanned + 1;
                                    v_after_priority := c.priority;
                                    v_after_rowid := c.rowid;
                                    CONTINUE WHEN c.id = ANY(v_claimed);
                                    CONTINUE WHEN headgate_sticky_elsewhere_v1(c.sticky_worker, p_worker);
                                    IF v_any_quarantine THEN
                                        v_fi := array_position(f_fp, c.fingerprint);
                                        IF v_fi IS NULL THEN
                                            f_fp := f_fp || c.fingerprint;
                                            f_bad := f_bad || EXISTS (
                                                SELECT 1 FROM quarantine
                                                WHERE fingerprint = c.fingerprint);
                                            v_fi := cardinality(f_fp);
                                        END IF;
                                        IF f_bad[v_fi] THEN
                                            x_quarantine[v_xi] := x_quarantine[v_xi] + 1;
                                            CONTINUE;
                                        END IF;
                                    END IF;
                                    v_ri := NULL;
                                    IF c.rate_class <> '' THEN
                                        v_ri := array_position(r_name, c.rate_class);
                                        IF v_ri IS NULL THEN
                                            -- admission.RateBucket.load: refilled by store time; a
                                            -- clock that stepped back mints nothing and is dirty
                                            SELECT limit_per_window, window_ms, burst, paused, tokens,
                                                   refilled_at_ms INTO v_rate
                                            FROM rate_classes WHERE name = c.rate_class FOR UPDATE;
                                            v_found := FOUND;
                                            r_name := r_name || c.rate_class;
                                            r_found := r_found || v_found;
                                            r_limit := r_limit || v_rate.limit_per_window;
                                            r_window := r_window || v_rate.window_ms;
                                            r_paused := r_paused || (v_rate.paused <> 0);
                                            r_tokens := r_tokens || headgate_rate_tokens_v1(
                                                v_rate.tokens, v_rate.refilled_at_ms,
                                                v_rate.limit_per_window, v_rate.window_ms,
                                                v_rate.burst, v_now);
                                            r_dirty := r_dirty || (v_now < v_rate.refilled_at_ms);
                                            r_blocked := r_blocked || false;
                                            v_ri := cardinality(r_name);
                                        END IF;
                                        IF NOT r_found[v_ri] THEN
                                            v_ri := NULL;
                                        ELSIF r_blocked[v_ri] OR r_paused[v_ri]
                                                OR r_tokens[v_ri] < c.weight THEN
                                            r_blocked[v_ri] := true;
                                            x_rate[v_xi] := x_rate[v_xi] + 1;
                                            CONTINUE;
                                        END IF;
                                    END IF;

                                    -- admission._ceiling
                                    v_verdict := 'ok';
                                    FOR v_li IN 1..cardinality(l_name) LOOP
                                        CONTINUE WHEN part_running[v_pi] < l_max[v_li];
                                        IF l_strategy[v_li] = 'discard' THEN
                                            DELETE FROM jobs WHERE id = c.id;
                                            v_verdict := 'gone';
                                        ELSIF l_strategy[v_li] = 'cancel_incoming' THEN
                                            UPDATE jobs SET state = 'cancelled', lease_id = NULL,
                                                lease_expires_at_ms = NULL, cancel_requested = 1,
                                                finalized_at_ms = v_now,
                                                expires_at_ms = v_now + retention_ms,
                                                errors = headgate_append_error(errors,
                                                    headgate_cancel_entry(v_now, format(
                                                        'cancelled: concurrency limit %s saturated '
                                                        '(%s running)', l_name[v_li], l_max[v_li]),
                                                        'cancel_incoming'))
                                            WHERE id = c.id;
                                            v_verdict := 'gone';
                                        ELSIF l_strategy[v_li] = 'cancel_running' THEN
                                            SELECT id INTO v_oldest_id FROM jobs
                                            WHERE queue = v_queue AND partition_key = part_key[v_pi]
                                              AND state = 'running' AND id <> ALL(v_kept)
                                            ORDER BY attempted_at_ms, rowid LIMIT 1 FOR UPDATE;
                                            IF NOT FOUND THEN
                                                v_verdict := 'reject';
                                            ELSE
                                                UPDATE jobs SET state = 'cancelled', lease_id = NULL,
                                                    lease_expires_at_ms = NULL, cancel_requested = 1,
                                                    finalized_at_ms = v_now,
                                                    expires_at_ms = v_now + retention_ms,
                                                    errors = headgate_append_error(errors,
                                                        headgate_cancel_entry(v_now, format(
                                                            'cancelled to make room: concurrency '
                                                            'limit %s (%s)', l_name[v_li],
                                                            l_max[v_li]), 'cancel_running'))
                                                WHERE id = v_oldest_id;
                                                part_running[v_pi] := part_running[v_pi] - 1;
                                                CONTINUE;
                                            END IF;
                                        ELSE
                                            v_verdict := 'reject';
                                        END IF;
                                        EXIT;
                                    END LOOP;
                                    IF v_verdict = 'reject' THEN
                                        x_limit[v_xi] := x_limit[v_xi] + 1;
                                        EXIT scan;
                                    END IF;
                                    IF v_verdict = 'gone' THEN
                                        x_limit[v_xi] := x_limit[v_xi] + 1;
                                        CONTINUE;
                                    END IF;

                                    IF v_ri IS NOT NULL THEN
                                        r_tokens[v_ri] := r_tokens[v_ri] - c.weight;
                                        r_dirty[v_ri] := true;
                                    END IF;
                                    v_claimed := v_claimed || c.id;
                                    part_running[v_pi] := part_running[v_pi] + 1;
                                    v_took := v_took + 1;
                                    EXIT scan WHEN v_took >= v_take;
                                END LOOP;
                                EXIT WHEN cardinality(v_candidates) < v_batch;
                            END LOOP scan;

                            part_deficit[v_pi] := part_deficit[v_pi] - v_took;
                            v_left := v_left - v_took;
                            IF v_took > 0 THEN
                                v_last := part_key[v_pi];
                            END IF;
                            IF v_took < v_take THEN
                                part_deficit[v_pi] := 0;  -- drained or blocked: DRR forgets its credit
                            ELSE
                                v_still := v_still || v_pi;
                            END IF;
                            EXIT WHEN v_left <= 0;  -- the round ends here, and so does the loop
                        END LOOP;
                        EXIT WHEN cardinality(v_still) = 0;
                        v_active_parts := v_still;
                        v_first_round := false;
                    END LOOP;

                    IF cardinality(g_queue) = 0 THEN
                        g_queue := array_fill(v_queue, ARRAY[cardinality(part_key)]);
                        g_key := part_key;
                        g_deficit := part_deficit;
                        g_loaded := part_loaded;
                        g_delta := ARRAY(SELECT n.running - n.base
                                         FROM unnest(part_running, part_base) WITH ORDINALITY
                                             AS n(running, base, i) ORDER BY n.i);
                    ELSE
                        SELECT coalesce(array_agg(s.queue), '{}'),
                               coalesce(array_agg(s.key), '{}'),
                               coalesce(array_agg(s.deficit), '{}'),
                               coalesce(array_agg(s.loaded), '{}'),
                               coalesce(array_agg(s.delta), '{}')
                        INTO g_queue, g_key, g_deficit, g_loaded, g_delta
                        FROM (
                            SELECT o.queue, o.key, o.deficit, o.loaded, o.delta
                            FROM unnest(g_queue, g_key, g_deficit, g_loaded, g_delta)
                                AS o(queue, key, deficit, loaded, delta)
                            WHERE NOT (o.queue = v_queue AND o.key = ANY(part_key))
                            UNION ALL
                            SELECT v_queue, n.key, n.deficit, n.loaded, n.running - n.base
                            FROM unnest(part_key, part_deficit, part_loaded, part_running, part_base)
                                AS n(key, deficit, loaded, running, base)
                        ) AS s;
                    END IF;
                    v_cursors[v_qi] := v_last;
                    v_got := v_want - v_left;
                END IF;

                v_remaining := v_remaining - v_got;
                IF v_pass = 1 AND v_got = v_shares[v_qi] THEN
                    v_hungry := v_hungry || v_qi;
                END IF;
            END LOOP;
        END admission;

        -- The completed acks and the claims in one statement: the counter triggers run
        -- once and take their rows in (queue, state) order, 'available' first, as an
        -- enqueue does. A claim is the shared CLAIM_JOBS; an ack lifecycle's success.
        IF cardinality(v_kept) > 0 OR cardinality(v_claimed) > 0 THEN
            UPDATE jobs SET
                state = CASE WHEN u.acked THEN 'completed' ELSE 'running' END,
                fence = CASE WHEN u.acked THEN jobs.fence ELSE jobs.fence + 1 END,
                lease_id = CASE WHEN u.acked THEN NULL ELSE p_lease_id END,
                lease_expires_at_ms = CASE WHEN u.acked THEN NULL ELSE v_now + p_lease_ms END,
                worker_id = CASE WHEN u.acked THEN jobs.worker_id ELSE p_worker END,
                attempted_at_ms = CASE WHEN u.acked THEN jobs.attempted_at_ms ELSE v_now END,
                cancel_requested = CASE WHEN u.acked THEN jobs.cancel_requested ELSE 0 END,
                finalized_at_ms = CASE WHEN u.acked THEN v_now ELSE jobs.finalized_at_ms END,
                expires_at_ms = CASE WHEN u.acked THEN v_now + jobs.retention_ms
                                     ELSE jobs.expires_at_ms END,
                result = CASE WHEN u.result IS NULL THEN jobs.result ELSE u.result END,
                result_schema_version = CASE WHEN u.result IS NULL
                                             THEN jobs.result_schema_version ELSE u.version END
            FROM (
                SELECT k.id, true AS acked, k.result, k.version
                FROM unnest(v_kept, v_kept_results, v_kept_versions) AS k(id, result, version)
                UNION ALL
                SELECT cl.id, false, NULL, NULL FROM unnest(v_claimed) AS cl(id)
            ) AS u
            WHERE jobs.id = ANY(v_kept || v_claimed) AND jobs.id = u.id
              AND (u.acked OR jobs.state = 'available');
        END IF;

        -- admission._write_back: fairness state, tokens and rejection counts, only what
        -- changed, after the claims (counter rows before partition rows: one lock order)
        -- (each loop is a query: skipped, as the history below, when there is nothing to write)
        IF g_deficit IS DISTINCT FROM g_loaded THEN
            FOR v_write IN
                SELECT s.queue, s.key, s.deficit
                FROM unnest(g_queue, g_key, g_deficit, g_loaded) AS s(queue, key, deficit, loaded)
                WHERE s.deficit IS DISTINCT FROM s.loaded
                ORDER BY s.queue COLLATE "C", s.key COLLATE "C"
            LOOP
                UPDATE partitions SET deficit = v_write.deficit
                WHERE queue = v_write.queue AND partition_key = v_write.key;
            END LOOP;
        END IF;
        IF cardinality(fm_queue) > 0 THEN
            FOR v_write IN
                SELECT DISTINCT ON (s.queue COLLATE "C", s.key COLLATE "C")
                       s.queue, s.key, s.priority, s.rowid
                FROM unnest(fm_queue, fm_key, fm_priority, fm_rowid)
                    AS s(queue, key, priority, rowid)
                ORDER BY s.queue COLLATE "C", s.key COLLATE "C", s.priority DESC, s.rowid
            LOOP
                UPDATE partitions SET scan_priority = v_write.priority,
                                      scan_rowid = v_write.rowid
                WHERE queue = v_write.queue AND partition_key = v_write.key;
            END LOOP;
        END IF;
        IF v_cursors IS DISTINCT FROM v_loaded_cursors THEN
            FOR v_write IN
                SELECT s.queue, s.cursor
                FROM unnest(v_active, v_cursors, v_loaded_cursors) AS s(queue, cursor, loaded)
                WHERE s.cursor <> s.loaded ORDER BY s.queue COLLATE "C"
            LOOP
                UPDATE queues SET rr_cursor = v_write.cursor WHERE name = v_write.queue;
            END LOOP;
        END IF;
        IF true = ANY(r_dirty) THEN
            FOR v_write IN
                SELECT s.name, s.tokens
                FROM unnest(r_name, r_found, r_tokens, r_dirty) AS s(name, found, tokens, dirty)
                WHERE s.found AND s.dirty ORDER BY s.name COLLATE "C"
            LOOP
                UPDATE rate_classes SET tokens = v_write.tokens, refilled_at_ms = v_now
                WHERE name = v_write.name;
            END LOOP;
        END IF;
        -- rows.bump_history: the acks' completions and the rejections, one row per queue
        IF cardinality(v_done_queues) > 0 OR 0 < ANY(x_rate || x_limit || x_quarantine) THEN
            INSERT INTO queue_history (queue, bucket_ms, completed, rejected_rate_class,
                                       rejected_concurrency_limit, rejected_quarantine)
            SELECT s.queue, v_now - v_now % headgate_history_bucket_ms(), sum(s.completed),
                   sum(s.rate), sum(s.lim), sum(s.quarantine)
            FROM (
                SELECT d.queue, 1 AS completed, 0 AS rate, 0 AS lim, 0 AS quarantine
                FROM unnest(v_done_queues) AS d(queue)
                UNION ALL
                SELECT x.queue, 0, x.rate, x.lim, x.quarantine
                FROM unnest(x_queue, x_rate, x_limit, x_quarantine) AS x(queue, rate, lim, quarantine)
            ) AS s
            GROUP BY s.queue HAVING sum(s.completed + s.rate + s.lim + s.quarantine) > 0
            ORDER BY s.queue COLLATE "C"
            ON CONFLICT (queue, bucket_ms) DO UPDATE SET
                completed = queue_history.completed + excluded.completed,
                -- the jobs one pass turned away, kept at the minute's largest (rows.bump_history)
                rejected_rate_class =
                    greatest(queue_history.rejected_rate_class, excluded.rejected_rate_class),
                rejected_concurrency_limit = greatest(queue_history.rejected_concurrency_limit,
                                                      excluded.rejected_concurrency_limit),
                rejected_quarantine =
                    greatest(queue_history.rejected_quarantine, excluded.rejected_quarantine);
        END IF;

        -- The claimed rows in full; one an operator changed meanwhile is not ours.
        RETURN QUERY
            SELECT (headgate_admitted_row(j)).*
            FROM unnest(v_claimed) WITH ORDINALITY AS t(claimed_id, ord)
            JOIN jobs j ON j.id = t.claimed_id
            WHERE j.id = ANY(v_claimed) AND j.lease_id = p_lease_id
            ORDER BY t.ord;
    END policy;
END $$;
