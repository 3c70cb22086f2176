-- The read side (inspection.py): counts from maintained tables, pages by keyset.

-- name: select_job
-- {columns}: rows.JOB_COLUMNS, or JOB_COLUMNS_WITH_PAYLOAD (SELECT_JOB_WITH_PAYLOAD).
SELECT {columns} FROM jobs WHERE id = ?

-- name: select_result
SELECT result, result_schema_version FROM jobs WHERE id = ? AND result IS NOT NULL

-- name: select_output
SELECT output, output_schema_version, output_fence, output_updated_at_ms FROM jobs
WHERE id = ? AND output IS NOT NULL

-- name: select_progress
SELECT progress_current, progress_total, progress_message, progress_fence,
    progress_updated_at_ms
FROM jobs WHERE id = ? AND progress_updated_at_ms IS NOT NULL

-- name: counts_all
SELECT state, sum(n) FROM queue_counts GROUP BY state

-- name: counts_of_queue
SELECT state, n FROM queue_counts WHERE queue = ?

-- name: recent_history
-- The buckets since the start of the previous minute: arrival and drain rates.
SELECT queue, bucket_ms, arrived, completed, failed FROM queue_history
WHERE bucket_ms >= ?

-- name: queue_counts
SELECT queue, state, n FROM queue_counts

-- name: queues_with_oldest
-- One statement for every queue (a round trip per queue on PostgreSQL added up on every
-- page that lists queues); each oldest age is one probe of jobs_available_age.
SELECT q.name, q.weight, q.paused, q.max_unfinished_jobs,
    (SELECT min(j.enqueued_at_ms) FROM jobs AS j
     WHERE j.queue = q.name AND j.state = 'available')
FROM queues AS q ORDER BY q.name

-- name: partitions
SELECT partition_key, deficit, waiting, running FROM partitions
WHERE queue = ? AND (waiting > 0 OR running > 0) ORDER BY waiting DESC, partition_key
LIMIT ?

-- name: rate_classes
-- {columns}: adaptive.COLUMNS, so each row after its name is a SELECT_CLASS row.
SELECT name, {columns} FROM rate_classes ORDER BY name

-- name: concurrency_limits
SELECT name, queue, max_concurrent, on_saturated FROM concurrency_limits ORDER BY name

-- name: quarantine_list
SELECT fingerprint, kind, crash_count, quarantined_at_ms, reason FROM quarantine
ORDER BY quarantined_at_ms DESC

-- name: queue_history
SELECT bucket_ms, arrived, completed, failed, depth, rejected_rate_class,
    rejected_concurrency_limit, rejected_quarantine
FROM queue_history WHERE queue = ? AND bucket_ms >= ? ORDER BY bucket_ms

-- name: history_counters
SELECT queue, bucket_ms, arrived, completed, failed, rejected_rate_class,
    rejected_concurrency_limit, rejected_quarantine
FROM queue_history WHERE bucket_ms >= ?

-- name: list_workers
SELECT worker_id, host, pid, queues, concurrency, inflight, polls, empty_polls,
    started_at_ms, heartbeat_at_ms, status, pending_signal, agent, kinds
FROM workers WHERE heartbeat_at_ms >= ? ORDER BY worker_id

-- name: running_jobs
-- jobs_running's order: no sort, and never more rows than the fleet's slots.
SELECT id, kind, queue, worker_id, attempted_at_ms, lease_expires_at_ms
FROM jobs WHERE state = 'running' ORDER BY lease_expires_at_ms LIMIT ?
