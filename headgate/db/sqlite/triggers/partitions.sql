-- Each partition's waiting (available) and running counts, which admission reads to
-- pick partitions without counting jobs. A batch enqueue's rows (counted = 1) are
-- counted by the batch itself (counts.sql says how); a deleted job leaves its
-- partition in jobs_count_delete (counts.sql).
CREATE TRIGGER jobs_partition_insert AFTER INSERT ON jobs
WHEN new.counted = 0 AND new.state IN ('available', 'running') BEGIN
    INSERT INTO partitions (queue, partition_key, waiting, running)
        VALUES (new.queue, new.partition_key, new.state = 'available', new.state = 'running')
        ON CONFLICT (queue, partition_key) DO UPDATE SET
            waiting = waiting + (new.state = 'available'),
            running = running + (new.state = 'running');
END;

CREATE TRIGGER jobs_partition_update AFTER UPDATE OF state ON jobs
WHEN old.state <> new.state
    AND (old.state IN ('available', 'running') OR new.state IN ('available', 'running')) BEGIN
    INSERT INTO partitions (queue, partition_key, waiting, running)
        VALUES (new.queue, new.partition_key,
                (new.state = 'available') - (old.state = 'available'),
                (new.state = 'running') - (old.state = 'running'))
        ON CONFLICT (queue, partition_key) DO UPDATE SET
            waiting = waiting + (new.state = 'available') - (old.state = 'available'),
            running = running + (new.state = 'running') - (old.state = 'running');
END;
