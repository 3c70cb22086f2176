-- The job latency histograms (table queue_latency, migration 0014): one upsert per
-- statement from its transition tables, however many jobs it admitted or finished, so
-- an admit or an ack batch costs one grouped insert, never one per job.

CREATE OR REPLACE FUNCTION headgate_latency_bound(v bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN v <= 5 THEN 5 WHEN v <= 10 THEN 10 WHEN v <= 25 THEN 25 WHEN v <= 50 THEN 50
         WHEN v <= 100 THEN 100 WHEN v <= 250 THEN 250 WHEN v <= 500 THEN 500
         WHEN v <= 1000 THEN 1000 WHEN v <= 2500 THEN 2500 WHEN v <= 5000 THEN 5000
         WHEN v <= 10000 THEN 10000 WHEN v <= 30000 THEN 30000 WHEN v <= 60000 THEN 60000
         WHEN v <= 300000 THEN 300000 WHEN v <= 900000 THEN 900000
         WHEN v <= 3600000 THEN 3600000 ELSE -1 END
$$;

CREATE OR REPLACE FUNCTION headgate_latency_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- One pass over the statement's changed rows: a renewal or a progress write (no
    -- state change) joins and finds nothing.
    WITH changed AS (
        SELECT n.queue, o.state = 'available' AS admitted, n.attempted_at_ms,
               n.finalized_at_ms, greatest(o.enqueued_at_ms, o.scheduled_at_ms) AS due_ms,
               o.attempted_at_ms AS started_ms
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        WHERE (o.state = 'available' AND n.state = 'running' AND n.attempted_at_ms IS NOT NULL)
           OR (o.state = 'running' AND n.state <> 'running' AND n.finalized_at_ms IS NOT NULL
               AND o.attempted_at_ms IS NOT NULL)
    ), observed AS (
        SELECT queue,
               CASE WHEN admitted THEN 'wait' ELSE 'run' END AS metric,
               CASE WHEN admitted THEN attempted_at_ms ELSE finalized_at_ms END AS at_ms,
               greatest(0, CASE WHEN admitted THEN attempted_at_ms - due_ms
                                ELSE finalized_at_ms - started_ms END) AS v
        FROM changed
    )
    INSERT INTO queue_latency (queue, bucket_ms, metric, le_ms, n, sum_ms)
    SELECT queue, at_ms - at_ms % 60000, metric, headgate_latency_bound(v), count(*), sum(v)
    FROM observed GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
    ON CONFLICT (queue, bucket_ms, metric, le_ms) DO UPDATE SET
        n = queue_latency.n + excluded.n, sum_ms = queue_latency.sum_ms + excluded.sum_ms;
    RETURN NULL;
END $$;

-- A retention-0 job is deleted straight from running when it completes.
CREATE OR REPLACE FUNCTION headgate_latency_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t bigint := (extract(epoch from clock_timestamp()) * 1000)::bigint;
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, metric, le_ms, n, sum_ms)
    SELECT queue, t - t % 60000, 'run', headgate_latency_bound(greatest(0, t - attempted_at_ms)),
           count(*), sum(greatest(0, t - attempted_at_ms))
    FROM del WHERE state = 'running' AND attempted_at_ms IS NOT NULL
    GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
    ON CONFLICT (queue, bucket_ms, metric, le_ms) DO UPDATE SET
        n = queue_latency.n + excluded.n, sum_ms = queue_latency.sum_ms + excluded.sum_ms;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER jobs_latency_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION headgate_latency_update();
CREATE OR REPLACE TRIGGER jobs_latency_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS del FOR EACH STATEMENT EXECUTE FUNCTION headgate_latency_delete();
