-- queue_counts, one row per (queue, state), kept exact by triggers so that every writer
-- of jobs (enqueue, admit, ack, lease expiry, an operator) keeps it without knowing of
-- it. The insert trigger also records the job's arrival (queue_history.arrived, in the
-- bucket of its enqueued_at_ms). A batch enqueue (headgate/adapters/sqlite/enqueue.py)
-- inserts its rows with counted = 1 and writes their counts, partitions and arrivals
-- itself, once per batch; every other insert has counted = 0 and is counted here.
-- The delete trigger also takes a deleted job out of its partition's counts
-- (partitions.sql keeps them for inserts and state changes).
CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs WHEN new.counted = 0 BEGIN
    INSERT INTO queue_counts (queue, state, n) VALUES (new.queue, new.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
    INSERT INTO queue_history (queue, bucket_ms, arrived)
        VALUES (new.queue, new.enqueued_at_ms - new.enqueued_at_ms % (
                    SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'), 1)
        ON CONFLICT (queue, bucket_ms) DO UPDATE SET arrived = arrived + 1;
END;

CREATE TRIGGER jobs_count_update AFTER UPDATE OF state ON jobs
WHEN old.state <> new.state BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
    INSERT INTO queue_counts (queue, state, n) VALUES (new.queue, new.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
    UPDATE partitions SET
        waiting = waiting - (old.state = 'available'),
        running = running - (old.state = 'running')
    WHERE old.state IN ('available', 'running')
        AND queue = old.queue AND partition_key = old.partition_key;
END;
