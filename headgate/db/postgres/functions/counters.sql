-- The per-queue state counters (queue_counts) and the partitions' waiting/running counts,
-- kept exact by statement-level triggers on jobs: one delta per statement from its
-- transition tables, however many rows it touched. The insert trigger also counts the
-- arrivals (queue_history.arrived, in the bucket of the jobs' enqueued_at_ms): every
-- insert into jobs is an enqueue, whether by the plain statement, a COPY batch or
-- headgate_enqueue_v3, so none of them writes arrivals itself.

CREATE OR REPLACE FUNCTION headgate_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_counts (queue, state, n)
    SELECT queue, state, count(*) FROM ins GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state) DO UPDATE SET n = queue_counts.n + excluded.n;
    INSERT INTO partitions (queue, partition_key, waiting, running)
    SELECT queue, partition_key,
           count(*) FILTER (WHERE state = 'available'), count(*) FILTER (WHERE state = 'running')
    FROM ins WHERE state IN ('available', 'running')
    GROUP BY queue, partition_key ORDER BY queue, partition_key
    ON CONFLICT (queue, partition_key) DO UPDATE SET
        waiting = partitions.waiting + excluded.waiting,
        running = partitions.running + excluded.running;
    -- after the counters, as admission writes its history after its claims: one order
    INSERT INTO queue_history (queue, bucket_ms, arrived)
    SELECT queue, enqueued_at_ms - enqueued_at_ms % headgate_history_bucket_ms(), count(*)
    FROM ins GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (queue, bucket_ms) DO UPDATE SET
        arrived = queue_history.arrived + excluded.arrived;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION headgate_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH changed AS (
        SELECT o.queue, o.partition_key, o.state AS old_state, n.state AS new_state
        FROM old_rows o JOIN new_rows n ON n.id = o.id WHERE o.state <> n.state
    ), deltas AS (
        SELECT queue, old_state AS state, -1 AS n FROM changed
        UNION ALL SELECT queue, new_state, 1 FROM changed
    )
    INSERT INTO queue_counts (queue, state, n)
    SELECT queue, state, sum(n) FROM deltas GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state) DO UPDATE SET n = queue_counts.n + excluded.n;
    WITH changed AS (
        SELECT o.queue, o.partition_key, o.state AS old_state, n.state AS new_state
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        WHERE o.state <> n.state
          AND (o.state IN ('available', 'running') OR n.state IN ('available', 'running'))
    )
    INSERT INTO partitions (queue, partition_key, waiting, running)
    SELECT queue, partition_key,
           sum((new_state = 'available')::int - (old_state = 'available')::int),
           sum((new_state = 'running')::int - (old_state = 'running')::int)
    FROM changed GROUP BY queue, partition_key ORDER BY queue, partition_key
    ON CONFLICT (queue, partition_key) DO UPDATE SET
        waiting = partitions.waiting + excluded.waiting,
        running = partitions.running + excluded.running;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION headgate_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_counts (queue, state, n)
    SELECT queue, state, -count(*) FROM del GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state) DO UPDATE SET n = queue_counts.n + excluded.n;
    INSERT INTO partitions (queue, partition_key, waiting, running)
    SELECT queue, partition_key,
           -count(*) FILTER (WHERE state = 'available'), -count(*) FILTER (WHERE state = 'running')
    FROM del WHERE state IN ('available', 'running')
    GROUP BY queue, partition_key ORDER BY queue, partition_key
    ON CONFLICT (queue, partition_key) DO UPDATE SET
        waiting = partitions.waiting + excluded.waiting,
        running = partitions.running + excluded.running;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER jobs_counts_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS ins FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_insert();
CREATE OR REPLACE TRIGGER jobs_counts_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_update();
CREATE OR REPLACE TRIGGER jobs_counts_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS del FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_delete();
