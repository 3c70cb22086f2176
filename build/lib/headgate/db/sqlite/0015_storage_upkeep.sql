-- The retention duty ages out history buckets older than its horizon, oldest first, in
-- bounded batches: queue_latency has queue_latency_bucket; this is queue_history's.
-- (Counter upserts change no indexed column, so the index costs only the first write
-- of a queue's minute.)
CREATE INDEX queue_history_bucket ON queue_history (bucket_ms);

-- A sweep's position across duty runs and servers, and what it has done, so that
-- /system/storage can report it without scanning. `uniques_orphans`: lifecycle unique
-- keys (expires_at_ms NULL) whose job was deleted; the sweep walks `uniques` by key,
-- a bounded batch per call, from `cursor` (NULL: the start) and counts what it pruned.
CREATE TABLE upkeep (
    name TEXT PRIMARY KEY,
    cursor BLOB,
    pruned INTEGER NOT NULL DEFAULT 0,
    passes INTEGER NOT NULL DEFAULT 0,
    pass_at_ms INTEGER
);
INSERT INTO upkeep (name) VALUES ('uniques_orphans');
