-- SQLite's enqueue policy (enqueue.py); PostgreSQL's is the function of
-- headgate/db/postgres/functions/enqueue.sql.

-- name: insert_jobs
-- {rows}: enqueue.ROW_MARKS per row (counted 0: the insert triggers count it) or
-- BATCH_ROW_MARKS (counted 1: the batch writes its counts itself, count_batch and
-- partitions_batch, one upsert per queue and state, per queue and partition).
INSERT INTO jobs (id, kind, schema_version, payload, fingerprint, queue, priority,
    partition_key, rate_class, weight, state, scheduled_at_ms, max_attempts, retention_ms,
    tags, sticky_worker, headers, enqueued_at_ms, periodic_schedule_id, periodic_tick_ms,
    was_pending, counted)
VALUES {rows}

-- name: count_batch
INSERT INTO queue_counts (queue, state, n) VALUES (?, ?, ?)
ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n

-- name: partitions_batch
INSERT INTO partitions (queue, partition_key, waiting) VALUES (?, ?, ?)
ON CONFLICT (queue, partition_key) DO UPDATE SET waiting = waiting + excluded.waiting

-- name: select_identity
-- What an id's identity compares: a replay, or an IdConflict.
SELECT id, kind, schema_version, payload, queue, priority, partition_key, rate_class, weight,
       max_attempts, tags, sticky_worker, headers
FROM jobs WHERE id IN ({marks})

-- name: select_quarantined
SELECT fingerprint FROM quarantine WHERE fingerprint IN ({marks})

-- name: select_limits
SELECT name, max_unfinished_jobs FROM queues WHERE name IN ({marks})
    AND max_unfinished_jobs IS NOT NULL

-- name: select_unfinished
-- {states}: the unfinished states, quoted.
SELECT coalesce(sum(n), 0) FROM queue_counts WHERE queue = ? AND state IN ({states})

-- name: select_unique
SELECT job_id, expires_at_ms FROM uniques WHERE key = ?

-- name: upsert_unique
INSERT INTO uniques (key, job_id, expires_at_ms) VALUES (?, ?, ?)
ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id, expires_at_ms = excluded.expires_at_ms

-- name: select_holder
SELECT state FROM jobs WHERE id = ?

-- name: probe_one
-- A single envelope's lookups in one read: id taken, fingerprint quarantined, the
-- queue's enqueue limit, the queue row present, and its unique key's row (NULL, NULL
-- without one).
SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?),
       EXISTS (SELECT 1 FROM quarantine WHERE fingerprint = ?),
       (SELECT max_unfinished_jobs FROM queues WHERE name = ?),
       EXISTS (SELECT 1 FROM queues WHERE name = ?),
       u.job_id, u.expires_at_ms
FROM (SELECT 1) LEFT JOIN uniques u ON u.key = ?

-- name: replace_holder
-- {assignments}: `column = ?` for the replacements _replace_holder names.
UPDATE jobs SET {assignments} WHERE id = ?
