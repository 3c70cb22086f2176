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

-- The policy block's steps (headgate_admit_v3, at the end of this file, reads as their
-- outline), each named for the step of SQLite's admission it mirrors. A step is called
-- once per call, per queue, per page of partitions or per partition visit, never per
-- candidate: the per-candidate checks are inline in headgate_take_v1, or the inlined SQL
-- functions above. They are PL/pgSQL, which keeps each statement's plan for the session,
-- since a SQL function the planner cannot inline (a FROM clause, DML) is planned again in
-- every statement that calls it (checks.sql). State that flows from step to step is
-- passed as INOUT arrays. Only headgate_admit_v3 calls them, so they run under its SET
-- clauses (generic plans, no sequential scans) and the plans they keep are made so.

-- lifecycle.ack_many for plain successes: rows locked in id order; an ack whose job is
-- no longer running under its lease and fence changes nothing and is lost (lost, code
-- point order). kept: the acks that complete their job, with its queue and partition
-- (whose running count headgate_claim_v1 lowers, with the claims) and what it stores;
-- acks of a job with retention 0 delete it here; done_queues: the queue of each applied
-- ack, for the history.
CREATE OR REPLACE FUNCTION headgate_ack_plain_v1(
    p_names TEXT[], p_ids TEXT[], p_leases TEXT[], p_fences BIGINT[], p_results BYTEA[],
    p_versions INTEGER[],
    OUT kept TEXT[], OUT kept_queues TEXT[], OUT kept_parts TEXT[], OUT kept_results BYTEA[],
    OUT kept_versions INTEGER[], OUT done_queues TEXT[], OUT lost TEXT[]
) LANGUAGE plpgsql AS $$
DECLARE
    v_deleted TEXT[];
BEGIN
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
    INTO kept, kept_queues, kept_parts, kept_results, kept_versions, v_deleted, done_queues
    FROM (
        -- Joined from the acks by primary key (filtering jobs by `id = ANY(acks)`
        -- tested the whole batch for every running job the plan walked). No state
        -- predicate here: with one, a plan made while jobs was
        -- small read every running job through jobs_running. A row still under its
        -- lease and fence is running; the state is checked on the rows read (in the
        -- aggregates: a WHERE would be pushed down into this subquery).
        SELECT j.id, j.state = 'running' AS running, j.retention_ms, j.queue,
               j.partition_key, a.result, a.version
        FROM unnest(p_ids, p_leases, p_fences, p_results, p_versions)
            AS a(id, lease_id, fence, result, version)
        JOIN jobs j ON j.id = a.id
        WHERE j.lease_id = a.lease_id AND j.fence = a.fence
        ORDER BY j.id FOR UPDATE OF j
    ) AS h;
    -- Every ack found its running job (one row each: ids are keys): none is lost.
    -- Otherwise EXCEPT (testing each ack against the kept array was O(acks²)).
    IF cardinality(kept) + cardinality(v_deleted) = cardinality(p_ids) THEN
        lost := '{}';
    ELSE
        lost := ARRAY(SELECT l.id FROM (
                          SELECT a.id FROM unnest(p_ids) AS a(id)
                          EXCEPT SELECT d.id FROM unnest(kept || v_deleted) AS d(id)
                      ) AS l ORDER BY l.id COLLATE "C");
    END IF;
    IF cardinality(v_deleted) > 0 THEN
        -- The deletion takes the counter rows of 'running' before the claims take
        -- those of 'available'; an enqueue takes 'available' first. Taking those
        -- first keeps one order (no deadlock with producers).
        PERFORM 1 FROM (SELECT 1 FROM queue_counts
                        WHERE queue = ANY(p_names) AND state = 'available'
                        ORDER BY queue, state FOR UPDATE) AS counters;
        DELETE FROM jobs WHERE id = ANY(v_deleted);
    END IF;
END $$;

-- lifecycle.promote_due over the caller's queues, called once an index probe found a
-- due job (the probe is the caller's: most admits have none, and a call costs more)
CREATE OR REPLACE FUNCTION headgate_promote_due_v1(p_names TEXT[], p_now BIGINT,
                                                   p_limit INTEGER) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET state = 'available'
    WHERE id IN (SELECT id FROM jobs WHERE headgate_due_v1(state, scheduled_at_ms, p_now)
                 AND queue = ANY(p_names)
                 ORDER BY scheduled_at_ms LIMIT p_limit FOR UPDATE SKIP LOCKED)
      AND headgate_due_v1(state, scheduled_at_ms, p_now);
END $$;

-- admission._weighted_shares, in the same float arithmetic: floors, then the leftover
-- to the largest fractions (ties to the earlier queue)
CREATE OR REPLACE FUNCTION headgate_weighted_shares_v1(p_capacity BIGINT, p_weights BIGINT[])
RETURNS BIGINT[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_total BIGINT;
    v_raw FLOAT8[];
    v_shares BIGINT[];
    v_order INTEGER[];
    v_leftover BIGINT;
BEGIN
    IF cardinality(p_weights) = 1 THEN
        RETURN ARRAY[p_capacity];
    END IF;
    SELECT sum(w) INTO v_total FROM unnest(p_weights) AS w;
    v_raw := ARRAY(SELECT (p_capacity * w)::float8 / v_total::float8
                   FROM unnest(p_weights) WITH ORDINALITY AS t(w, i) ORDER BY i);
    v_shares := ARRAY(SELECT floor(r)::bigint FROM unnest(v_raw) WITH ORDINALITY AS t(r, i)
                      ORDER BY i);
    v_leftover := p_capacity - (SELECT sum(s) FROM unnest(v_shares) AS s);
    v_order := ARRAY(SELECT i::integer FROM unnest(v_raw) WITH ORDINALITY AS t(r, i)
                     ORDER BY r - floor(r) DESC, i);
    FOR v_i IN 1..v_leftover LOOP
        v_shares[v_order[v_i]] := v_shares[v_order[v_i]] + 1;
    END LOOP;
    RETURN v_shares;
END $$;

-- The next page of p_queue's partitions with waiting jobs in rotation order (the first
-- round of headgate_admit_queue_v1 reads them lazily, as admission._rotation does),
-- appended to part_*: page_phase 1 reads those after page_after (at first the cursor
-- p_cursor), 2 from the start up to p_cursor, and 3 says all are read. Each page is its
-- own index range: no condition with OR, which the index could only filter. part_base:
-- the running count as the shared code reads it, after the acks (p_kept_*); the
-- deficits and running counts of a queue revisited (a second pass) resume the state it
-- left (p_g_*).
CREATE OR REPLACE FUNCTION headgate_partition_page_v1(
    p_queue TEXT, p_cursor TEXT, p_page INTEGER,
    p_g_queue TEXT[], p_g_key TEXT[], p_g_deficit BIGINT[], p_g_loaded BIGINT[],
    p_g_delta BIGINT[], p_kept_queues TEXT[], p_kept_parts TEXT[],
    INOUT page_phase INTEGER, INOUT page_after TEXT,
    INOUT part_key TEXT[], INOUT part_deficit BIGINT[], INOUT part_loaded BIGINT[],
    INOUT part_running BIGINT[], INOUT part_base BIGINT[]
) LANGUAGE plpgsql AS $$
DECLARE
    page_key TEXT[];
    page_deficit BIGINT[];
    page_running BIGINT[];
    v_k INTEGER;
    v_i INTEGER;
BEGIN
    IF page_phase = 1 THEN
        SELECT coalesce(array_agg(p.partition_key ORDER BY p.partition_key), '{}'),
               coalesce(array_agg(p.deficit ORDER BY p.partition_key), '{}'),
               coalesce(array_agg(p.running ORDER BY p.partition_key), '{}')
        INTO page_key, page_deficit, page_running
        FROM (SELECT partition_key, deficit, running FROM partitions
              WHERE queue = p_queue AND has_waiting AND waiting > 0
                AND partition_key > page_after
              ORDER BY partition_key LIMIT p_page) AS p;
    ELSIF page_after IS NULL THEN
        SELECT coalesce(array_agg(p.partition_key ORDER BY p.partition_key), '{}'),
               coalesce(array_agg(p.deficit ORDER BY p.partition_key), '{}'),
               coalesce(array_agg(p.running ORDER BY p.partition_key), '{}')
        INTO page_key, page_deficit, page_running
        FROM (SELECT partition_key, deficit, running FROM partitions
              WHERE queue = p_queue AND has_waiting AND waiting > 0
                AND partition_key <= p_cursor
              ORDER BY partition_key LIMIT p_page) AS p;
    ELSE
        SELECT coalesce(array_agg(p.partition_key ORDER BY p.partition_key), '{}'),
               coalesce(array_agg(p.deficit ORDER BY p.partition_key), '{}'),
               coalesce(array_agg(p.running ORDER BY p.partition_key), '{}')
        INTO page_key, page_deficit, page_running
        FROM (SELECT partition_key, deficit, running FROM partitions
              WHERE queue = p_queue AND has_waiting AND waiting > 0
                AND partition_key > page_after
                AND partition_key <= p_cursor
              ORDER BY partition_key LIMIT p_page) AS p;
    END IF;
    IF cardinality(page_key) < p_page THEN
        page_phase := page_phase + 1;
        page_after := NULL;
    ELSE
        page_after := page_key[p_page];
    END IF;
    IF p_queue <> ALL(p_g_queue) THEN
        -- No carried state: the page as read, each partition's running count less the
        -- acks of its jobs (a worker's own few: a loop costs less than a statement).
        IF p_queue = ANY(p_kept_queues) THEN
            FOR v_k IN 1..cardinality(p_kept_queues) LOOP
                CONTINUE WHEN p_kept_queues[v_k] <> p_queue;
                v_i := array_position(page_key, p_kept_parts[v_k]);
                IF v_i IS NOT NULL THEN
                    page_running[v_i] := page_running[v_i] - 1;
                END IF;
            END LOOP;
        END IF;
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
            FROM unnest(p_g_queue, p_g_key, p_g_deficit, p_g_loaded, p_g_delta)
                AS s(queue, key, deficit, loaded, delta)
            WHERE s.queue = p_queue
        ) AS g ON g.key = n.key LEFT JOIN (
            SELECT d.key, count(*) AS acked
            FROM unnest(p_kept_queues, p_kept_parts) AS d(queue, key)
            WHERE d.queue = p_queue GROUP BY d.key
        ) AS k ON k.key = n.key;
    END IF;
END $$;

-- admission._take: one visit of partition p_key, taking up to p_take of its jobs by
-- light candidate scans in (priority, arrival) order, each candidate through every
-- policy (sticky worker, quarantine, rate class, the queue's ceilings p_ceiling_* in
-- max_concurrent order). part_running: the partition's running count as this call has
-- left it. The claims, the rate buckets (r_*: loaded FOR UPDATE on first use; r_found
-- false: no such class) and the quarantine verdicts per fingerprint (f_*) carry over from
-- visit to visit; rejected_* count the queue's. new_fence_*: where the write-back moves
-- the partition's scan fence, NULL to leave it.
CREATE OR REPLACE FUNCTION headgate_take_v1(
    p_queue TEXT, p_key TEXT, p_take BIGINT, p_worker TEXT, p_now BIGINT,
    p_max_scan INTEGER, p_scan_extra INTEGER, p_any_quarantine BOOLEAN, p_kept TEXT[],
    p_ceiling_names TEXT[], p_ceiling_max BIGINT[], p_ceiling_strategies TEXT[],
    INOUT part_running BIGINT, INOUT claimed TEXT[],
    INOUT r_name TEXT[], INOUT r_found BOOLEAN[], INOUT r_paused BOOLEAN[],
    INOUT r_tokens FLOAT8[], INOUT r_dirty BOOLEAN[], INOUT r_blocked BOOLEAN[],
    INOUT f_fp TEXT[], INOUT f_bad BOOLEAN[],
    INOUT rejected_rate BIGINT, INOUT rejected_limit BIGINT,
    INOUT rejected_quarantine BIGINT,
    OUT took BIGINT, OUT new_fence_priority INTEGER, OUT new_fence_rowid BIGINT
) LANGUAGE plpgsql AS $$
DECLARE
    v_scanned INTEGER := 0;
    v_batch BIGINT;
    v_after_priority INTEGER;
    v_after_rowid BIGINT;
    v_candidates headgate_candidate[];
    c headgate_candidate;
    v_fence_priority INTEGER;
    v_fence_rowid BIGINT;
    v_fi INTEGER;
    v_ri INTEGER;
    v_rate RECORD;
    v_found BOOLEAN;
    v_busy BOOLEAN;
    v_in_order BOOLEAN;
    v_verdict TEXT;
    v_oldest_id TEXT;
BEGIN
    took := 0;
    SELECT scan_priority, scan_rowid INTO v_fence_priority, v_fence_rowid
    FROM partitions
    WHERE queue = p_queue AND partition_key = p_key;
    <<scan>>
    WHILE took < p_take AND v_scanned < p_max_scan LOOP
        -- First what is wanted, then room to skip: every row read
        -- here is locked, one WAL record each (admission._take).
        v_batch := p_take - took
                   + CASE WHEN v_after_rowid IS NULL THEN 0
                          ELSE p_scan_extra END;
        IF v_after_rowid IS NULL THEN
            -- from the partition's scan fence, moved forward at the
            -- write-back once the first candidate is well past it
            v_candidates := headgate_candidates_v1(
                p_queue, p_key, v_fence_priority,
                v_fence_rowid, true, v_batch);
            IF cardinality(v_candidates) > 0
               AND (v_fence_rowid IS NULL
                    OR v_candidates[1].priority < v_fence_priority
                    OR v_candidates[1].rowid - v_fence_rowid
                       > headgate_scan_fence_slack()) THEN
                new_fence_priority := v_candidates[1].priority;
                new_fence_rowid := v_candidates[1].rowid;
            END IF;
        ELSE
            v_candidates := headgate_candidates_v1(
                p_queue, p_key, v_after_priority,
                v_after_rowid, false, v_batch);
        END IF;
        FOREACH c IN ARRAY v_candidates LOOP
            v_scanned := v_scanned + 1;
            v_after_priority := c.priority;
            v_after_rowid := c.rowid;
            CONTINUE WHEN c.id = ANY(claimed);
            CONTINUE WHEN headgate_sticky_elsewhere_v1(c.sticky_worker, p_worker);
            IF p_any_quarantine THEN
                v_fi := array_position(f_fp, c.fingerprint);
                IF v_fi IS NULL THEN
                    f_fp := f_fp || c.fingerprint;
                    f_bad := f_bad || EXISTS (
                        SELECT 1 FROM quarantine
                        WHERE fingerprint = c.fingerprint);
                    v_fi := cardinality(f_fp);
                END IF;
                IF f_bad[v_fi] THEN
                    rejected_quarantine := rejected_quarantine + 1;
                    CONTINUE;
                END IF;
            END IF;
            v_ri := NULL;
            IF c.rate_class <> '' THEN
                v_ri := array_position(r_name, c.rate_class);
                IF v_ri IS NULL THEN
                    -- admission.RateBucket.load: refilled by store time; a
                    -- clock that stepped back mints nothing and is dirty.
                    -- A class row is waited for only above every one this turn
                    -- holds (code point order); one below is taken if free, else
                    -- its jobs wait for the next turn (busy: tokens -Infinity).
                    -- Admissions of other queues taking two classes in opposite
                    -- orders would deadlock otherwise.
                    v_in_order := true;
                    FOR v_i IN 1..coalesce(cardinality(r_name), 0) LOOP
                        IF r_found[v_i]
                           AND r_name[v_i] COLLATE "C" > c.rate_class COLLATE "C" THEN
                            v_in_order := false;
                            EXIT;
                        END IF;
                    END LOOP;
                    IF v_in_order THEN
                        SELECT limit_per_window, window_ms, burst, paused, tokens,
                               refilled_at_ms INTO v_rate
                        FROM rate_classes WHERE name = c.rate_class FOR UPDATE;
                        v_found := FOUND;
                        v_busy := false;
                    ELSE
                        SELECT limit_per_window, window_ms, burst, paused, tokens,
                               refilled_at_ms INTO v_rate
                        FROM rate_classes WHERE name = c.rate_class
                        FOR UPDATE SKIP LOCKED;
                        v_found := FOUND;
                        v_busy := NOT v_found AND EXISTS (
                            SELECT 1 FROM rate_classes WHERE name = c.rate_class);
                    END IF;
                    r_name := r_name || c.rate_class;
                    r_found := r_found || (v_found OR v_busy);
                    r_paused := r_paused || (v_rate.paused <> 0);
                    r_tokens := r_tokens || CASE WHEN v_busy THEN '-Infinity'::float8
                        ELSE headgate_rate_tokens_v1(
                            v_rate.tokens, v_rate.refilled_at_ms,
                            v_rate.limit_per_window, v_rate.window_ms,
                            v_rate.burst, p_now) END;
                    r_dirty := r_dirty || (p_now < v_rate.refilled_at_ms);
                    r_blocked := r_blocked || v_busy;
                    v_ri := cardinality(r_name);
                END IF;
                IF NOT r_found[v_ri] THEN
                    v_ri := NULL;
                ELSIF r_blocked[v_ri] OR r_paused[v_ri]
                        OR r_tokens[v_ri] < c.weight THEN
                    r_blocked[v_ri] := true;
                    IF r_tokens[v_ri] > '-Infinity'::float8 THEN  -- busy: no verdict
                        rejected_rate := rejected_rate + 1;
                    END IF;
                    CONTINUE;
                END IF;
            END IF;

            -- admission._ceiling
            v_verdict := 'ok';
            FOR v_li IN 1..cardinality(p_ceiling_names) LOOP
                CONTINUE WHEN part_running < p_ceiling_max[v_li];
                IF p_ceiling_strategies[v_li] = 'discard' THEN
                    DELETE FROM jobs WHERE id = c.id;
                    v_verdict := 'gone';
                ELSIF p_ceiling_strategies[v_li] = 'cancel_incoming' THEN
                    UPDATE jobs SET state = 'cancelled', lease_id = NULL,
                        lease_expires_at_ms = NULL, cancel_requested = 1,
                        finalized_at_ms = p_now,
                        expires_at_ms = p_now + retention_ms,
                        errors = headgate_append_error(errors,
                            headgate_cancel_entry(p_now, format(
                                'cancelled: concurrency limit %s saturated '
                                '(%s running)', p_ceiling_names[v_li],
                                p_ceiling_max[v_li]), 'cancel_incoming'))
                    WHERE id = c.id;
                    v_verdict := 'gone';
                ELSIF p_ceiling_strategies[v_li] = 'cancel_running' THEN
                    SELECT id INTO v_oldest_id FROM jobs
                    WHERE queue = p_queue AND partition_key = p_key
                      AND state = 'running' AND id <> ALL(p_kept)
                    ORDER BY attempted_at_ms, rowid LIMIT 1 FOR UPDATE;
                    IF NOT FOUND THEN
                        v_verdict := 'reject';
                    ELSE
                        UPDATE jobs SET state = 'cancelled', lease_id = NULL,
                            lease_expires_at_ms = NULL, cancel_requested = 1,
                            finalized_at_ms = p_now,
                            expires_at_ms = p_now + retention_ms,
                            errors = headgate_append_error(errors,
                                headgate_cancel_entry(p_now, format(
                                    'cancelled to make room: concurrency '
                                    'limit %s (%s)', p_ceiling_names[v_li],
                                    p_ceiling_max[v_li]), 'cancel_running'))
                        WHERE id = v_oldest_id;
                        part_running := part_running - 1;
                        CONTINUE;
                    END IF;
                ELSE
                    v_verdict := 'reject';
                END IF;
                EXIT;
            END LOOP;
            IF v_verdict = 'reject' THEN
                rejected_limit := rejected_limit + 1;
                EXIT scan;
            END IF;
            IF v_verdict = 'gone' THEN
                rejected_limit := rejected_limit + 1;
                CONTINUE;
            END IF;

            IF v_ri IS NOT NULL THEN
                r_tokens[v_ri] := r_tokens[v_ri] - c.weight;
                r_dirty[v_ri] := true;
            END IF;
            claimed := claimed || c.id;
            part_running := part_running + 1;
            took := took + 1;
            EXIT scan WHEN took >= p_take;
        END LOOP;
        EXIT WHEN cardinality(v_candidates) < v_batch;
    END LOOP scan;
END $$;

-- admission._admit_queue: deficit round robin over p_queue's partitions, up to p_want
-- claims; got: how many it made. The first round reads the partitions a page at a time
-- in rotation order (headgate_partition_page_v1), after the partition served last
-- (last_served, the queue's cursor) so ties rotate between calls; later rounds revisit
-- only partitions already read. g_*: the deficit round robin state of every (queue,
-- partition) seen this call (deficit now, as loaded, and the running count change not
-- yet in the partition counters), which this visit's partitions join or update; fm_*:
-- the scan fences to move forward. The claims, rate buckets and quarantine verdicts pass
-- through to each visit (headgate_take_v1); rejected_*: the queue's rejections this time.
CREATE OR REPLACE FUNCTION headgate_admit_queue_v1(
    p_queue TEXT, p_want BIGINT, p_quantum BIGINT, p_worker TEXT, p_now BIGINT,
    p_max_scan INTEGER, p_scan_extra INTEGER, p_any_quarantine BOOLEAN,
    p_kept TEXT[], p_kept_queues TEXT[], p_kept_parts TEXT[],
    INOUT last_served TEXT, INOUT claimed TEXT[],
    INOUT g_queue TEXT[], INOUT g_key TEXT[], INOUT g_deficit BIGINT[],
    INOUT g_loaded BIGINT[], INOUT g_delta BIGINT[],
    INOUT fm_queue TEXT[], INOUT fm_key TEXT[], INOUT fm_priority INTEGER[],
    INOUT fm_rowid BIGINT[],
    INOUT r_name TEXT[], INOUT r_found BOOLEAN[], INOUT r_paused BOOLEAN[],
    INOUT r_tokens FLOAT8[], INOUT r_dirty BOOLEAN[], INOUT r_blocked BOOLEAN[],
    INOUT f_fp TEXT[], INOUT f_bad BOOLEAN[],
    OUT got BIGINT, OUT rejected_rate BIGINT, OUT rejected_limit BIGINT,
    OUT rejected_quarantine BIGINT
) LANGUAGE plpgsql AS $$
DECLARE
    v_cursor TEXT := last_served;
    v_n INTEGER;
    -- the queue's ceilings
    l_name TEXT[];
    l_max BIGINT[];
    l_strategy TEXT[];
    -- the queue's partitions (waiting > 0) in read order, then as this visit leaves them
    part_key TEXT[] := '{}';
    part_deficit BIGINT[] := '{}';
    part_loaded BIGINT[] := '{}';
    part_running BIGINT[] := '{}';
    part_base BIGINT[] := '{}';
    v_quantum BIGINT;
    -- first round: v_active_parts not yet set, positions are read order; the pages
    -- still to read (phase < 3) start after v_after
    v_page INTEGER;
    v_phase INTEGER := 1;
    v_after TEXT := last_served;
    v_first_round BOOLEAN := true;
    v_active_parts INTEGER[];
    v_still INTEGER[];
    v_i INTEGER;
    v_pi INTEGER;
    v_left BIGINT := p_want;
    v_take BIGINT;
    v_took BIGINT;
    v_running BIGINT;
    v_fence_priority INTEGER;
    v_fence_rowid BIGINT;
BEGIN
    got := 0;
    rejected_rate := 0;
    rejected_limit := 0;
    rejected_quarantine := 0;
    -- How many have waiting jobs, counted up to p_want (with as many partitions
    -- as wanted jobs or more the quantum is 1 whatever their number), and the
    -- queue's ceilings, in one statement.
    SELECT (SELECT count(*) FROM (SELECT 1 FROM partitions
                                  WHERE queue = p_queue AND has_waiting AND waiting > 0
                                  LIMIT p_want) AS waiting),
           coalesce(array_agg(l.name ORDER BY l.max_concurrent, l.name), '{}'),
           coalesce(array_agg(l.max_concurrent ORDER BY l.max_concurrent, l.name), '{}'),
           coalesce(array_agg(l.on_saturated ORDER BY l.max_concurrent, l.name), '{}')
    INTO v_n, l_name, l_max, l_strategy
    FROM concurrency_limits l WHERE l.queue = p_queue;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    v_quantum := coalesce(p_quantum, greatest(1, (p_want + v_n - 1) / v_n));
    -- Resume after the partition served last, so ties rotate between calls. A
    -- queue may have thousands of partitions and an admit visits a few: a page
    -- holds about the visits that fill p_want when each gives its quantum.
    v_page := (p_want + v_quantum - 1) / v_quantum + 4;
    WHILE v_left > 0 LOOP
        v_still := '{}';
        v_i := 0;
        LOOP
            v_i := v_i + 1;
            IF v_first_round THEN
                WHILE v_i > cardinality(part_key) AND v_phase < 3 LOOP
                    SELECT * INTO v_phase, v_after, part_key, part_deficit, part_loaded,
                                  part_running, part_base
                    FROM headgate_partition_page_v1(
                        p_queue, v_cursor, v_page, g_queue, g_key, g_deficit, g_loaded,
                        g_delta, p_kept_queues, p_kept_parts, v_phase, v_after, part_key,
                        part_deficit, part_loaded, part_running, part_base);
                END LOOP;
                EXIT WHEN v_i > cardinality(part_key);
                v_pi := v_i;
            ELSE
                EXIT WHEN v_i > cardinality(v_active_parts);
                v_pi := v_active_parts[v_i];
            END IF;
            part_deficit[v_pi] := part_deficit[v_pi] + v_quantum;
            v_take := least(part_deficit[v_pi], v_left);

            SELECT * INTO v_running, claimed, r_name, r_found, r_paused, r_tokens, r_dirty,
                          r_blocked, f_fp, f_bad, rejected_rate, rejected_limit,
                          rejected_quarantine, v_took, v_fence_priority, v_fence_rowid
            FROM headgate_take_v1(
                p_queue, part_key[v_pi], v_take, p_worker, p_now, p_max_scan, p_scan_extra,
                p_any_quarantine, p_kept, l_name, l_max, l_strategy, part_running[v_pi],
                claimed, r_name, r_found, r_paused, r_tokens, r_dirty, r_blocked, f_fp,
                f_bad, rejected_rate, rejected_limit, rejected_quarantine);
            part_running[v_pi] := v_running;
            IF v_fence_rowid IS NOT NULL THEN
                fm_queue := fm_queue || p_queue;
                fm_key := fm_key || part_key[v_pi];
                fm_priority := fm_priority || v_fence_priority;
                fm_rowid := fm_rowid || v_fence_rowid;
            END IF;

            part_deficit[v_pi] := part_deficit[v_pi] - v_took;
            v_left := v_left - v_took;
            IF v_took > 0 THEN
                last_served := part_key[v_pi];
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
        g_queue := array_fill(p_queue, ARRAY[cardinality(part_key)]);
        g_key := part_key;
        g_deficit := part_deficit;
        g_loaded := part_loaded;
        g_delta := '{}';
        FOR v_i IN 1..cardinality(part_key) LOOP
            g_delta[v_i] := part_running[v_i] - part_base[v_i];
        END LOOP;
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
            WHERE NOT (o.queue = p_queue AND o.key = ANY(part_key))
            UNION ALL
            SELECT p_queue, n.key, n.deficit, n.loaded, n.running - n.base
            FROM unnest(part_key, part_deficit, part_loaded, part_running, part_base)
                AS n(key, deficit, loaded, running, base)
        ) AS s;
    END IF;
    got := p_want - v_left;
END $$;

-- The completed acks and the claims in one statement: the counter triggers run
-- once and take their rows in (queue, state) order, 'available' first, as an
-- enqueue does. A claim is the shared CLAIM_JOBS; an ack lifecycle's success.
CREATE OR REPLACE FUNCTION headgate_claim_v1(
    p_kept TEXT[], p_kept_results BYTEA[], p_kept_versions INTEGER[], p_claimed TEXT[],
    p_lease_id TEXT, p_lease_ms BIGINT, p_worker TEXT, p_now BIGINT
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET
        state = CASE WHEN u.acked THEN 'completed' ELSE 'running' END,
        fence = CASE WHEN u.acked THEN jobs.fence ELSE jobs.fence + 1 END,
        lease_id = CASE WHEN u.acked THEN NULL ELSE p_lease_id END,
        lease_expires_at_ms = CASE WHEN u.acked THEN NULL ELSE p_now + p_lease_ms END,
        worker_id = CASE WHEN u.acked THEN jobs.worker_id ELSE p_worker END,
        attempted_at_ms = CASE WHEN u.acked THEN jobs.attempted_at_ms ELSE p_now END,
        cancel_requested = CASE WHEN u.acked THEN jobs.cancel_requested ELSE 0 END,
        finalized_at_ms = CASE WHEN u.acked THEN p_now ELSE jobs.finalized_at_ms END,
        expires_at_ms = CASE WHEN u.acked THEN p_now + jobs.retention_ms
                             ELSE jobs.expires_at_ms END,
        result = CASE WHEN u.result IS NULL THEN jobs.result ELSE u.result END,
        result_schema_version = CASE WHEN u.result IS NULL
                                     THEN jobs.result_schema_version ELSE u.version END
    FROM (
        SELECT k.id, true AS acked, k.result, k.version
        FROM unnest(p_kept, p_kept_results, p_kept_versions) AS k(id, result, version)
        UNION ALL
        SELECT cl.id, false, NULL, NULL FROM unnest(p_claimed) AS cl(id)
    ) AS u
    WHERE jobs.id = ANY(p_kept || p_claimed) AND jobs.id = u.id
      AND (u.acked OR jobs.state = 'available');
END $$;

-- admission._write_back: fairness state, scan fences, cursors, tokens and rejection
-- counts, only what changed, after the claims (counter rows before partition rows: one
-- lock order). Each loop is a query: skipped, as the history below, when there is
-- nothing to write. The arguments are the policy block's state as the queue visits
-- left it (p_g_*: headgate_admit_queue_v1's g_*, and so on).
CREATE OR REPLACE FUNCTION headgate_write_back_v1(
    p_now BIGINT,
    p_g_queue TEXT[], p_g_key TEXT[], p_g_deficit BIGINT[], p_g_loaded BIGINT[],
    p_fm_queue TEXT[], p_fm_key TEXT[], p_fm_priority INTEGER[], p_fm_rowid BIGINT[],
    p_active TEXT[], p_cursors TEXT[], p_loaded_cursors TEXT[],
    p_r_name TEXT[], p_r_found BOOLEAN[], p_r_tokens FLOAT8[], p_r_dirty BOOLEAN[],
    p_done_queues TEXT[], p_x_queue TEXT[], p_x_rate BIGINT[], p_x_limit BIGINT[],
    p_x_quarantine BIGINT[]
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_write RECORD;
BEGIN
    IF p_g_deficit IS DISTINCT FROM p_g_loaded THEN
        FOR v_write IN
            SELECT s.queue, s.key, s.deficit
            FROM unnest(p_g_queue, p_g_key, p_g_deficit, p_g_loaded)
                AS s(queue, key, deficit, loaded)
            WHERE s.deficit IS DISTINCT FROM s.loaded
            ORDER BY s.queue COLLATE "C", s.key COLLATE "C"
        LOOP
            UPDATE partitions SET deficit = v_write.deficit
            WHERE queue = v_write.queue AND partition_key = v_write.key;
        END LOOP;
    END IF;
    IF cardinality(p_fm_queue) > 0 THEN
        FOR v_write IN
            SELECT DISTINCT ON (s.queue COLLATE "C", s.key COLLATE "C")
                   s.queue, s.key, s.priority, s.rowid
            FROM unnest(p_fm_queue, p_fm_key, p_fm_priority, p_fm_rowid)
                AS s(queue, key, priority, rowid)
            ORDER BY s.queue COLLATE "C", s.key COLLATE "C", s.priority DESC, s.rowid
        LOOP
            UPDATE partitions SET scan_priority = v_write.priority,
                                  scan_rowid = v_write.rowid
            WHERE queue = v_write.queue AND partition_key = v_write.key;
        END LOOP;
    END IF;
    IF p_cursors IS DISTINCT FROM p_loaded_cursors THEN
        FOR v_write IN
            SELECT s.queue, s.cursor
            FROM unnest(p_active, p_cursors, p_loaded_cursors) AS s(queue, cursor, loaded)
            WHERE s.cursor <> s.loaded ORDER BY s.queue COLLATE "C"
        LOOP
            UPDATE queues SET rr_cursor = v_write.cursor WHERE name = v_write.queue;
        END LOOP;
    END IF;
    IF true = ANY(p_r_dirty) THEN
        -- One statement: each row was locked when admission loaded its bucket.
        UPDATE rate_classes SET tokens = s.tokens, refilled_at_ms = p_now
        FROM unnest(p_r_name, p_r_found, p_r_tokens, p_r_dirty) AS s(name, found, tokens, dirty)
        WHERE s.found AND s.dirty AND rate_classes.name = s.name;
    END IF;
    -- rows.bump_history: the acks' completions and the rejections, one row per queue
    -- (p_x_*: one entry per queue visit, summed here)
    IF cardinality(p_done_queues) > 0 OR 0 < ANY(p_x_rate || p_x_limit || p_x_quarantine) THEN
        INSERT INTO queue_history (queue, bucket_ms, completed, rejected_rate_class,
                                   rejected_concurrency_limit, rejected_quarantine)
        SELECT s.queue, p_now - p_now % headgate_history_bucket_ms(), sum(s.completed),
               sum(s.rate), sum(s.lim), sum(s.quarantine)
        FROM (
            SELECT d.queue, 1 AS completed, 0 AS rate, 0 AS lim, 0 AS quarantine
            FROM unnest(p_done_queues) AS d(queue)
            UNION ALL
            SELECT x.queue, 0, x.rate, x.lim, x.quarantine
            FROM unnest(p_x_queue, p_x_rate, p_x_limit, p_x_quarantine)
                AS x(queue, rate, lim, quarantine)
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
                -- The store clock once the queue lock is held (the CASE orders the two):
                -- read before, a turn that waited would date its leases from then.
                SELECT CASE WHEN headgate_lock_queue_v1(p_queues[1])::text = ''
                            THEN headgate_now_ms()
                       END AS now_ms
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
                WHERE queue = p_queues[1] AND has_waiting AND waiting > 0
                  AND EXISTS (SELECT 1 FROM open_queue)
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
        v_now BIGINT;
        v_names TEXT[];
        v_lock TEXT;
        -- acks applied: completed (their partitions' running counts are not yet lowered:
        -- the claim writes them with the claims), the rest deleted (retention 0)
        v_kept TEXT[] := '{}';
        v_kept_queues TEXT[] := '{}';
        v_kept_parts TEXT[] := '{}';
        v_kept_results BYTEA[] := '{}';
        v_kept_versions INTEGER[] := '{}';
        v_done_queues TEXT[] := '{}';
        v_lost TEXT[];
        v_lost_id TEXT;
        -- the caller's unpaused queues, in the caller's order
        v_active TEXT[];
        v_weights BIGINT[];
        v_loaded_cursors TEXT[];
        v_cursors TEXT[];
        v_shares BIGINT[];
        v_hungry INTEGER[] := '{}';
        v_any_quarantine BOOLEAN;
        v_due BOOLEAN;
        v_remaining BIGINT;
        v_pass INTEGER := 1;
        v_step INTEGER := 0;
        v_qi INTEGER;
        v_queue TEXT;
        v_want BIGINT;
        v_got BIGINT;
        v_cursor TEXT;
        v_rejected_rate BIGINT;
        v_rejected_limit BIGINT;
        v_rejected_quarantine BIGINT;
        -- The decision so far, carried from queue to queue (headgate_admit_queue_v1 says
        -- what each holds). The claims, in decision order:
        v_claimed TEXT[] := '{}';
        g_queue TEXT[] := '{}';
        g_key TEXT[] := '{}';
        g_deficit BIGINT[] := '{}';
        g_loaded BIGINT[] := '{}';
        g_delta BIGINT[] := '{}';
        fm_queue TEXT[] := '{}';
        fm_key TEXT[] := '{}';
        fm_priority INTEGER[] := '{}';
        fm_rowid BIGINT[] := '{}';
        r_name TEXT[] := '{}';
        r_found BOOLEAN[] := '{}';
        r_paused BOOLEAN[] := '{}';
        r_tokens FLOAT8[] := '{}';
        r_dirty BOOLEAN[] := '{}';
        r_blocked BOOLEAN[] := '{}';
        f_fp TEXT[] := '{}';
        f_bad BOOLEAN[] := '{}';
        -- rejection counts, an entry per queue visit
        x_queue TEXT[] := '{}';
        x_rate BIGINT[] := '{}';
        x_limit BIGINT[] := '{}';
        x_quarantine BIGINT[] := '{}';
    BEGIN
        IF cardinality(p_queues) = 1 THEN
            v_names := p_queues;
        ELSE
            v_names := ARRAY(SELECT u FROM unnest(p_queues) WITH ORDINALITY AS t(u, i)
                             GROUP BY u ORDER BY min(i));
        END IF;
        -- First the queues' admission locks, in code point order like dialect.lock_queues
        -- (Python's sorted()): one order with the shared lifecycle (lifecycle.lock_job_queues).
        -- One queue, its own acks (a worker's steady state): no order to find.
        IF cardinality(v_names) = 1 AND v_names[1] = ALL(p_ack_queues) THEN
            PERFORM headgate_lock_queue_v1(v_names[1]);
        ELSE
            FOR v_lock IN
                SELECT DISTINCT u COLLATE "C" FROM unnest(v_names || p_ack_queues) AS u
                ORDER BY 1
            LOOP
                PERFORM headgate_lock_queue_v1(v_lock);
            END LOOP;
        END IF;
        -- The store time once the locks are held, so admissions' times follow their
        -- order: one read before a wait for the lock could precede the admission that
        -- held it, whose rate buckets would then refill from that earlier time twice.
        v_now := coalesce(p_now, headgate_now_ms());

        -- lifecycle.ack_many for plain successes; the lost acks are returned first
        IF cardinality(p_ack_ids) > 0 THEN
            SELECT * INTO v_kept, v_kept_queues, v_kept_parts, v_kept_results, v_kept_versions,
                          v_done_queues, v_lost
            FROM headgate_ack_plain_v1(v_names, p_ack_ids, p_ack_leases, p_ack_fences,
                                       p_ack_results, p_ack_versions);
            FOREACH v_lost_id IN ARRAY v_lost LOOP
                v_out.lost_id := v_lost_id;
                RETURN NEXT v_out;
            END LOOP;
        END IF;

        <<admission>>
        BEGIN
            -- What admission reads first, in one statement: the caller's unpaused queues,
            -- whether any fingerprint is quarantined and whether a job of theirs is due.
            SELECT array_agg(q.name ORDER BY t.i), array_agg(q.weight ORDER BY t.i),
                   array_agg(q.rr_cursor ORDER BY t.i),
                   EXISTS (SELECT 1 FROM quarantine),
                   EXISTS (SELECT 1 FROM jobs
                           WHERE headgate_due_v1(state, scheduled_at_ms, v_now)
                             AND queue = ANY(v_names))
            INTO v_active, v_weights, v_loaded_cursors, v_any_quarantine, v_due
            FROM queues q JOIN unnest(v_names) WITH ORDINALITY AS t(n, i) ON q.name = t.n
            WHERE q.name = ANY(v_names) AND q.paused = 0;
            -- lifecycle.promote_due over the caller's queues
            IF v_due THEN
                PERFORM headgate_promote_due_v1(v_names, v_now, p_promote_limit);
            END IF;
            IF v_active IS NULL OR p_capacity = 0 THEN
                EXIT admission;
            END IF;
            v_cursors := v_loaded_cursors;
            -- admission._weighted_shares
            v_shares := headgate_weighted_shares_v1(p_capacity, v_weights);

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
                    SELECT * INTO v_cursor, v_claimed, g_queue, g_key, g_deficit, g_loaded,
                                  g_delta, fm_queue, fm_key, fm_priority, fm_rowid, r_name,
                                  r_found, r_paused, r_tokens, r_dirty, r_blocked, f_fp, f_bad,
                                  v_got, v_rejected_rate, v_rejected_limit,
                                  v_rejected_quarantine
                    FROM headgate_admit_queue_v1(
                        v_queue, v_want, p_quantum, p_worker, v_now, p_max_scan,
                        p_scan_extra, v_any_quarantine, v_kept, v_kept_queues, v_kept_parts,
                        v_cursors[v_qi], v_claimed, g_queue, g_key, g_deficit, g_loaded,
                        g_delta, fm_queue, fm_key, fm_priority, fm_rowid, r_name, r_found,
                        r_paused, r_tokens, r_dirty, r_blocked, f_fp, f_bad);
                    v_cursors[v_qi] := v_cursor;
                    x_queue := x_queue || v_queue;
                    x_rate := x_rate || v_rejected_rate;
                    x_limit := x_limit || v_rejected_limit;
                    x_quarantine := x_quarantine || v_rejected_quarantine;
                END IF;

                v_remaining := v_remaining - v_got;
                IF v_pass = 1 AND v_got = v_shares[v_qi] THEN
                    v_hungry := v_hungry || v_qi;
                END IF;
            END LOOP;
        END admission;

        -- The completed acks and the claims, then admission._write_back (in that order:
        -- counter rows before partition rows).
        IF cardinality(v_kept) > 0 OR cardinality(v_claimed) > 0 THEN
            PERFORM headgate_claim_v1(v_kept, v_kept_results, v_kept_versions, v_claimed,
                                      p_lease_id, p_lease_ms, p_worker, v_now);
        END IF;
        PERFORM headgate_write_back_v1(
            v_now, g_queue, g_key, g_deficit, g_loaded, fm_queue, fm_key, fm_priority,
            fm_rowid, v_active, v_cursors, v_loaded_cursors, r_name, r_found, r_tokens,
            r_dirty, v_done_queues, x_queue, x_rate, x_limit, x_quarantine);

        -- The claimed rows in full; one an operator changed meanwhile is not ours.
        RETURN QUERY
            SELECT (headgate_admitted_row(j)).*
            FROM unnest(v_claimed) WITH ORDINALITY AS t(claimed_id, ord)
            JOIN jobs j ON j.id = t.claimed_id
            WHERE j.id = ANY(v_claimed) AND j.lease_id = p_lease_id
            ORDER BY t.ord;
    END policy;
END $$;
