-- Queue figures beside the counters: sampled memory and the quiet-groups view
-- (queue_admin.py). Every read is bounded.

-- name: pick_sample_queues
-- The queues sampled least recently (never sampled first).
SELECT q.name FROM queues q LEFT JOIN queue_memory m ON m.queue = q.name
ORDER BY coalesce(m.sampled_at_ms, 0), q.name LIMIT ?

-- name: queue_total
SELECT coalesce(sum(n), 0) FROM queue_counts WHERE queue = ?

-- name: sample_bytes
-- A job's stored bytes over a capped sample; a rough per-row overhead is added in
-- Python (queue_admin.ROW_OVERHEAD_BYTES).
SELECT count(*), coalesce(sum(b), 0) FROM (SELECT
    length(id) + length(kind) + length(payload) + length(fingerprint) + length(tags)
    + length(headers) + length(errors) + coalesce(length(result), 0)
    + coalesce(length(output), 0) + coalesce(length(progress_message), 0) AS b
    FROM jobs WHERE queue = ? LIMIT ?) s

-- name: record_memory
INSERT INTO queue_memory (queue, memory_bytes, sampled_jobs, sampled_at_ms)
VALUES (?, ?, ?, ?) ON CONFLICT (queue) DO UPDATE SET
    memory_bytes = excluded.memory_bytes, sampled_jobs = excluded.sampled_jobs,
    sampled_at_ms = excluded.sampled_at_ms

-- name: memory_samples
SELECT queue, memory_bytes, sampled_at_ms FROM queue_memory

-- name: queue_names
SELECT name FROM queues ORDER BY name

-- name: waiting_partitions
-- How many partitions wait (up to a bound) and the most any of them holds. {waiting}:
-- the dialect's waiting_partition, the predicate the index of waiting partitions has.
SELECT count(*), coalesce(max(waiting), 0) FROM (SELECT waiting FROM partitions
    WHERE queue = ? AND {waiting} LIMIT ?) s

-- name: queue_available
SELECT coalesce(sum(n), 0) FROM queue_counts WHERE queue = ? AND state = 'available'

-- name: partition_holding
SELECT partition_key FROM partitions WHERE queue = ? AND {waiting} AND waiting = ? LIMIT 1

-- name: quiet_oldest
-- The oldest available job outside the noisy partition, among the queue's oldest.
-- `enqueued_at_ms IS NOT NULL` (always true) is what lets PostgreSQL walk
-- jobs_available_age for this (its migration 18), not sort the queue.
SELECT min(enqueued_at_ms) FROM (SELECT enqueued_at_ms, partition_key FROM jobs
    WHERE queue = ? AND state = 'available' AND enqueued_at_ms IS NOT NULL
    ORDER BY enqueued_at_ms LIMIT ?) s
WHERE partition_key <> ?
