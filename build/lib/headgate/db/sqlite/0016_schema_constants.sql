-- The numbers the triggers need, by name instead of retyped (headgate/core/
-- schema_constants.py, and LATENCY_BOUNDS_MS in headgate/core/latency.py): `headgate
-- migrate` writes these two tables from the Python constants (headgate/adapters/
-- migrations.py, write_sqlite_constants), in this migration's transaction and again
-- whenever a constant changed. schema_constants holds one row per name; a latency v
-- falls in the bucket of the smallest upper_ms >= v, labelled le_ms (the last row,
-- upper_ms the largest integer, is the +Inf bucket).
CREATE TABLE schema_constants (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE latency_bounds (
    upper_ms INTEGER PRIMARY KEY,
    le_ms INTEGER NOT NULL
);

-- Migration 0014's latency triggers, reading their bucket width and bounds from the
-- tables above.
DROP TRIGGER jobs_latency_wait;
CREATE TRIGGER jobs_latency_wait AFTER UPDATE OF state ON jobs
WHEN old.state = 'available' AND new.state = 'running' AND new.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, metric, le_ms, n, sum_ms)
    SELECT new.queue, new.attempted_at_ms - new.attempted_at_ms % (
               SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'),
           'wait',
           (SELECT le_ms FROM latency_bounds WHERE upper_ms >= v ORDER BY upper_ms LIMIT 1),
           1, v
    FROM (SELECT max(0, new.attempted_at_ms - max(old.enqueued_at_ms, old.scheduled_at_ms))
                 AS v)
    WHERE true
    ON CONFLICT (queue, bucket_ms, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

DROP TRIGGER jobs_latency_run;
CREATE TRIGGER jobs_latency_run AFTER UPDATE OF state ON jobs
WHEN old.state = 'running' AND new.state <> 'running' AND new.finalized_at_ms IS NOT NULL
    AND old.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, metric, le_ms, n, sum_ms)
    SELECT new.queue, new.finalized_at_ms - new.finalized_at_ms % (
               SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'),
           'run',
           (SELECT le_ms FROM latency_bounds WHERE upper_ms >= v ORDER BY upper_ms LIMIT 1),
           1, v
    FROM (SELECT max(0, new.finalized_at_ms - old.attempted_at_ms) AS v)
    WHERE true
    ON CONFLICT (queue, bucket_ms, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

-- A retention-0 job is deleted straight from running when it completes.
DROP TRIGGER jobs_latency_run_deleted;
CREATE TRIGGER jobs_latency_run_deleted AFTER DELETE ON jobs
WHEN old.state = 'running' AND old.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, metric, le_ms, n, sum_ms)
    SELECT old.queue,
           t - t % (SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'),
           'run',
           (SELECT le_ms FROM latency_bounds WHERE upper_ms >= v ORDER BY upper_ms LIMIT 1),
           1, v
    FROM (SELECT t, max(0, t - old.attempted_at_ms) AS v
          FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS t))
    WHERE true
    ON CONFLICT (queue, bucket_ms, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

-- Migration 0012's last_error trigger, reading its length from schema_constants.
DROP TRIGGER jobs_last_error;
CREATE TRIGGER jobs_last_error AFTER UPDATE OF errors ON jobs
WHEN new.errors <> old.errors
BEGIN
    UPDATE jobs SET last_error = substr(
        CASE WHEN instr(coalesce(json_extract(new.errors, '$[#-1].error'), ''), char(10)) > 0
             THEN substr(json_extract(new.errors, '$[#-1].error'), 1,
                         instr(json_extract(new.errors, '$[#-1].error'), char(10)) - 1)
             ELSE coalesce(json_extract(new.errors, '$[#-1].error'), '') END, 1,
        (SELECT value FROM schema_constants WHERE name = 'last_error_max_chars'))
    WHERE rowid = new.rowid;
END;
