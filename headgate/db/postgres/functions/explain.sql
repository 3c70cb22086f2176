-- headgate_explain_v1: explain_admission on PostgreSQL, a dry run of admit.sql's policy
-- block for one job: the checks it applies, in its order (due time, queue pause,
-- quarantine, rate class, concurrency limits, then fairness within the partition), by the
-- same functions and reads (headgate_due_v1's states, headgate_rate_tokens_v1's refill,
-- the ceilings in max_concurrent order), read-only: nothing locked, refilled or written,
-- so asking never changes what admission then decides. SQLite's explain is the Python of
-- headgate/adapters/sqlite/admission.py beside its admission.
--
-- Returns the reason the policy block would give: admissible, the blocking policy
-- (NULL when admissible or not waiting), its numbers and the wait they imply in ms (NULL
-- when unknown); all NULL when there is no such job.
CREATE OR REPLACE FUNCTION headgate_explain_v1(
    p_job_id TEXT, p_now BIGINT,
    OUT admissible BOOLEAN, OUT blocked_by TEXT, OUT detail JSONB, OUT wait_ms BIGINT
) LANGUAGE plpgsql STABLE AS $$
DECLARE
    j RECORD;
    v_rate RECORD;
    v_limit RECORD;
    v_tokens FLOAT8;
    v_crashes BIGINT;
    v_running BIGINT := 0;
    v_waiting BIGINT := 0;
    v_ahead BIGINT;
    v_numbers JSONB;
BEGIN
    SELECT state, queue, partition_key, priority, rowid, fingerprint, rate_class, weight,
           scheduled_at_ms, sticky_worker
    INTO j FROM jobs WHERE id = p_job_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    admissible := false;
    IF j.state IN ('scheduled', 'retryable') THEN  -- headgate_due_v1's states
        blocked_by := 'schedule';
        wait_ms := greatest(0, j.scheduled_at_ms - p_now);
        detail := jsonb_build_object('state', j.state, 'scheduled_at_ms', j.scheduled_at_ms,
                                     'due_in_ms', wait_ms);
        RETURN;
    END IF;
    IF j.state <> 'available' THEN
        detail := jsonb_build_object('state', j.state);
        RETURN;
    END IF;
    detail := jsonb_build_object('state', j.state, 'queue', j.queue,
                                 'partition_key', j.partition_key);

    IF EXISTS (SELECT 1 FROM queues WHERE name = j.queue AND paused <> 0) THEN
        blocked_by := 'queue_paused';
        detail := detail || jsonb_build_object('paused', true);
        RETURN;
    END IF;

    SELECT crash_count INTO v_crashes FROM quarantine WHERE fingerprint = j.fingerprint;
    IF FOUND THEN
        blocked_by := 'quarantine';
        detail := detail || jsonb_build_object('fingerprint', j.fingerprint,
                                               'crash_count', v_crashes);
        RETURN;
    END IF;

    IF j.rate_class <> '' THEN
        SELECT limit_per_window, window_ms, burst, paused, tokens, refilled_at_ms INTO v_rate
        FROM rate_classes WHERE name = j.rate_class;
        IF FOUND THEN
            v_tokens := headgate_rate_tokens_v1(v_rate.tokens, v_rate.refilled_at_ms,
                v_rate.limit_per_window, v_rate.window_ms, v_rate.burst, p_now);
            v_numbers := jsonb_build_object(
                'rate_class', j.rate_class, 'tokens_available', round(v_tokens::numeric, 3),
                'weight', j.weight, 'limit', v_rate.limit_per_window,
                'window_ms', v_rate.window_ms, 'burst', v_rate.burst,
                'paused', v_rate.paused <> 0);
            IF v_rate.paused <> 0 THEN
                blocked_by := 'rate_class';
                detail := detail || v_numbers;
                RETURN;
            END IF;
            IF j.weight > v_rate.burst THEN
                -- the bucket never holds that many tokens: no wait would help
                blocked_by := 'rate_class';
                detail := detail || v_numbers || '{"weight_exceeds_burst": true}';
                RETURN;
            END IF;
            IF v_tokens < j.weight THEN
                blocked_by := 'rate_class';
                wait_ms := ceil((j.weight - v_tokens) * v_rate.window_ms
                                / v_rate.limit_per_window);
                detail := detail || v_numbers || jsonb_build_object('refill_in_ms', wait_ms);
                RETURN;
            END IF;
        END IF;
    END IF;

    SELECT running, waiting INTO v_running, v_waiting
    FROM partitions WHERE queue = j.queue AND partition_key = j.partition_key;
    v_running := coalesce(v_running, 0);
    v_waiting := coalesce(v_waiting, 0);
    FOR v_limit IN
        SELECT name, max_concurrent, on_saturated FROM concurrency_limits
        WHERE queue = j.queue ORDER BY max_concurrent, name
    LOOP
        IF v_running >= v_limit.max_concurrent THEN
            blocked_by := 'concurrency_limit';
            detail := detail || jsonb_build_object(
                'limit', v_limit.name, 'running', v_running,
                'max_concurrent', v_limit.max_concurrent, 'on_saturated', v_limit.on_saturated);
            RETURN;
        END IF;
    END LOOP;

    -- the candidate scan's order: priority, then arrival (counted up to a bound)
    SELECT count(*) INTO v_ahead
    FROM (SELECT 1 FROM jobs
          WHERE queue = j.queue AND partition_key = j.partition_key AND state = 'available'
            AND (priority > j.priority OR (priority = j.priority AND rowid < j.rowid))
          LIMIT 10001) AS ahead;
    IF j.sticky_worker <> '' THEN
        detail := detail || jsonb_build_object('sticky_worker', j.sticky_worker);
    END IF;
    IF v_ahead > 0 THEN
        blocked_by := 'fairness';
        detail := detail || jsonb_build_object('position_in_partition', v_ahead,
            'partition_waiting', v_waiting, 'partition_running', v_running);
        RETURN;
    END IF;
    admissible := true;
    wait_ms := 0;
    detail := detail || '{"position_in_partition": 0}';
END $$;
