-- Per-queue job latency histograms in the history's minute buckets, kept by the store
-- itself (triggers on jobs, like queue_counts), so every server exports the fleet's
-- figures: `wait` is available -> running (from the later of enqueue and due time to
-- the admit), `run` is running -> terminal (from the admit to finalization, or to the
-- delete of a retention-0 job). le_ms is a bucket's upper bound, -1 for +Inf; n and
-- sum_ms are that bucket's count and total. The bounds are LATENCY_BOUNDS_MS in
-- headgate/core/latency.py.
CREATE TABLE queue_latency (
    queue TEXT NOT NULL,
    bucket_ms INTEGER NOT NULL,
    metric TEXT NOT NULL,
    le_ms INTEGER NOT NULL,
    n INTEGER NOT NULL DEFAULT 0,
    sum_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, bucket_ms, metric, le_ms)
) WITHOUT ROWID;
CREATE INDEX queue_latency_bucket ON queue_latency (bucket_ms);

CREATE TRIGGER jobs_latency_wait AFTER UPDATE OF state ON jobs
WHEN old.state = 'available' AND new.state = 'running' AND new.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, metric, le_ms, n, sum_ms)
    SELECT new.queue, new.attempted_at_ms - new.attempted_at_ms % 60000, 'wait',
           CASE WHEN v <= 5 THEN 5 WHEN v <= 10 THEN 10 WHEN v <= 25 THEN 25 WHEN v <= 50 THEN 50
         WHEN v <= 100 THEN 100 WHEN v <= 250 THEN 250 WHEN v <= 500 THEN 500
         WHEN v <= 1000 THEN 1000 WHEN v <= 2500 THEN 2500 WHEN v <= 5000 THEN 5000
         WHEN v <= 10000 THEN 10000 WHEN v <= 30000 THEN 30000 WHEN v <= 60000 THEN 60000
         WHEN v <= 300000 THEN 300000 WHEN v <= 900000 THEN 900000
         WHEN v <= 3600000 THEN 3600000 ELSE -1 END, 1, v
    FROM (SELECT max(0, new.attempted_at_ms - max(old.enqueued_at_ms, old.scheduled_at_ms)) AS v)
    WHERE true
    ON CONFLICT (queue, bucket_ms, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

CREATE TRIGGER jobs_latency_run AFTER UPDATE OF state ON jobs
WHEN old.state = 'running' AND new.state <> 'running' AND new.finalized_at_ms IS NOT NULL
    AND old.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, metric, le_ms, n, sum_ms)
    SELECT new.queue, new.finalized_at_ms - new.finalized_at_ms % 60000, 'run',
           CASE WHEN v <= 5 THEN 5 WHEN v <= 10 THEN 10 WHEN v <= 25 THEN 25 WHEN v <= 50 THEN 50
         WHEN v <= 100 THEN 100 WHEN v <= 250 THEN 250 WHEN v <= 500 THEN 500
         WHEN v <= 1000 THEN 1000 WHEN v <= 2500 THEN 2500 WHEN v <= 5000 THEN 5000
         WHEN v <= 10000 THEN 10000 WHEN v <= 30000 THEN 30000 WHEN v <= 60000 THEN 60000
         WHEN v <= 300000 THEN 300000 WHEN v <= 900000 THEN 900000
         WHEN v <= 3600000 THEN 3600000 ELSE -1 END, 1, v
    FROM (SELECT max(0, new.finalized_at_ms - old.attempted_at_ms) AS v)
    WHERE true
    ON CONFLICT (queue, bucket_ms, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

-- A retention-0 job is deleted straight from running when it completes.
CREATE TRIGGER jobs_latency_run_deleted AFTER DELETE ON jobs
WHEN old.state = 'running' AND old.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, metric, le_ms, n, sum_ms)
    SELECT old.queue, t - t % 60000, 'run', CASE WHEN v <= 5 THEN 5 WHEN v <= 10 THEN 10 WHEN v <= 25 THEN 25 WHEN v <= 50 THEN 50
         WHEN v <= 100 THEN 100 WHEN v <= 250 THEN 250 WHEN v <= 500 THEN 500
         WHEN v <= 1000 THEN 1000 WHEN v <= 2500 THEN 2500 WHEN v <= 5000 THEN 5000
         WHEN v <= 10000 THEN 10000 WHEN v <= 30000 THEN 30000 WHEN v <= 60000 THEN 60000
         WHEN v <= 300000 THEN 300000 WHEN v <= 900000 THEN 900000
         WHEN v <= 3600000 THEN 3600000 ELSE -1 END, 1, v
    FROM (SELECT t, max(0, t - old.attempted_at_ms) AS v
          FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS t))
    WHERE true
    ON CONFLICT (queue, bucket_ms, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;
