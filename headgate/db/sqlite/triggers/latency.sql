-- The latency histograms (queue_latency) by queue and kind, in the history's buckets
-- (schema_constants' history_bucket_ms), each value counted in the bucket of the
-- smallest latency_bounds.upper_ms at or above it. `wait` is available -> running (from
-- the later of enqueue and due time to the admit); `run` is running -> terminal (from
-- the admit to finalization, or to the delete of a retention-0 job, which goes straight
-- from running to deleted and is timed with SQLite's own clock at the delete).
CREATE TRIGGER jobs_latency_wait AFTER UPDATE OF state ON jobs
WHEN old.state = 'available' AND new.state = 'running' AND new.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, kind, metric, le_ms, n, sum_ms)
    SELECT new.queue, new.attempted_at_ms - new.attempted_at_ms % (
               SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'),
           new.kind, 'wait',
           (SELECT le_ms FROM latency_bounds WHERE upper_ms >= v ORDER BY upper_ms LIMIT 1),
           1, v
    FROM (SELECT max(0, new.attempted_at_ms - max(old.enqueued_at_ms, old.scheduled_at_ms))
                 AS v)
    WHERE true
    ON CONFLICT (queue, bucket_ms, kind, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

CREATE TRIGGER jobs_latency_run AFTER UPDATE OF state ON jobs
WHEN old.state = 'running' AND new.state <> 'running' AND new.finalized_at_ms IS NOT NULL
    AND old.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, kind, metric, le_ms, n, sum_ms)
    SELECT new.queue, new.finalized_at_ms - new.finalized_at_ms % (
               SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'),
           new.kind, 'run',
           (SELECT le_ms FROM latency_bounds WHERE upper_ms >= v ORDER BY upper_ms LIMIT 1),
           1, v
    FROM (SELECT max(0, new.finalized_at_ms - old.attempted_at_ms) AS v)
    WHERE true
    ON CONFLICT (queue, bucket_ms, kind, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

CREATE TRIGGER jobs_latency_run_deleted AFTER DELETE ON jobs
WHEN old.state = 'running' AND old.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, kind, metric, le_ms, n, sum_ms)
    SELECT old.queue,
           t - t % (SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'),
           old.kind, 'run',
           (SELECT le_ms FROM latency_bounds WHERE upper_ms >= v ORDER BY upper_ms LIMIT 1),
           1, v
    FROM (SELECT t, max(0, t - old.attempted_at_ms) AS v
          FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS t))
    WHERE true
    ON CONFLICT (queue, bucket_ms, kind, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;
