-- The latency histograms by kind as well as by queue, so the console and the API can
-- answer a kind's wait and run time percentiles (Prometheus keeps reading them by
-- queue: it sums the kinds). The table is rebuilt with `kind` in its key; buckets
-- written before it have the kind '' (unknown). The triggers of 0016 are recreated
-- writing the job's kind; they are dropped first, since renaming a table checks the
-- triggers that name it.
DROP TRIGGER jobs_latency_wait;
DROP TRIGGER jobs_latency_run;
DROP TRIGGER jobs_latency_run_deleted;

CREATE TABLE queue_latency_by_kind (
    queue TEXT NOT NULL,
    bucket_ms INTEGER NOT NULL,
    kind TEXT NOT NULL DEFAULT '',
    metric TEXT NOT NULL,
    le_ms INTEGER NOT NULL,
    n INTEGER NOT NULL DEFAULT 0,
    sum_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, bucket_ms, kind, metric, le_ms)
) WITHOUT ROWID;
INSERT INTO queue_latency_by_kind (queue, bucket_ms, kind, metric, le_ms, n, sum_ms)
SELECT queue, bucket_ms, '', metric, le_ms, n, sum_ms FROM queue_latency;
DROP TABLE queue_latency;
ALTER TABLE queue_latency_by_kind RENAME TO queue_latency;
CREATE INDEX queue_latency_bucket ON queue_latency (bucket_ms);

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

-- A retention-0 job is deleted straight from running when it completes.
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
