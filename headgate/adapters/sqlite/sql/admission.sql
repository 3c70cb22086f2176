-- SQLite's admission gate (admission.py). The same decision on PostgreSQL is the
-- function of headgate/db/postgres/functions/admit.sql.

-- name: select_queues
-- The caller's queue rows with what else admit must know before scanning, in one read
-- (an index peek each): whether the queue has ceilings, whether anything is quarantined,
-- whether any of the queues has due jobs, and its partitions with waiting jobs counted
-- up to the capacity (what count_partitions would say on the queue's first visit).
SELECT name, weight, paused, rr_cursor,
    EXISTS (SELECT 1 FROM concurrency_limits WHERE concurrency_limits.queue = queues.name),
    EXISTS (SELECT 1 FROM quarantine),
    EXISTS (SELECT 1 FROM jobs WHERE jobs.state IN ('scheduled', 'retryable')
            AND jobs.scheduled_at_ms <= ? AND jobs.queue IN ({marks})),
    (SELECT count(*) FROM (SELECT 1 FROM partitions
                           WHERE partitions.queue = queues.name AND waiting > 0
                           LIMIT ?) AS waiting)
FROM queues WHERE name IN ({marks})

-- name: count_partitions
-- A queue's partitions with waiting jobs (the partial index partitions_waiting): how
-- many, counted up to a limit; the next two read them in key order from the start or
-- after a key, a page at a time.
SELECT count(*) FROM (SELECT 1 FROM partitions WHERE queue = ? AND waiting > 0 LIMIT ?) AS waiting

-- name: select_partitions
SELECT partition_key, deficit, running FROM partitions
WHERE queue = ? AND waiting > 0 ORDER BY partition_key LIMIT ?

-- name: select_partitions_after
SELECT partition_key, deficit, running FROM partitions
WHERE queue = ? AND waiting > 0 AND partition_key > ? ORDER BY partition_key LIMIT ?

-- name: select_candidates
-- Light columns only: a blocked backlog never costs payload reads.
SELECT rowid, id, priority, fingerprint, rate_class, weight, sticky_worker FROM jobs
WHERE queue = ? AND partition_key = ? AND state = 'available'
ORDER BY priority DESC, rowid LIMIT ?{skip_locked}

-- name: select_candidates_after
SELECT rowid, id, priority, fingerprint, rate_class, weight, sticky_worker FROM jobs
WHERE queue = ? AND partition_key = ? AND state = 'available'
  AND (priority < ? OR (priority = ? AND rowid > ?))
ORDER BY priority DESC, rowid LIMIT ?{skip_locked}

-- name: select_rate_class
SELECT limit_per_window, window_ms, burst, paused, tokens, refilled_at_ms
FROM rate_classes WHERE name = ?{for_update}

-- name: update_rate_tokens
UPDATE rate_classes SET tokens = ?, refilled_at_ms = ? WHERE name = ?

-- name: select_limits
SELECT name, max_concurrent, on_saturated FROM concurrency_limits
WHERE queue = ? ORDER BY max_concurrent, name

-- name: select_quarantine
SELECT crash_count FROM quarantine WHERE fingerprint = ?

-- name: claim_jobs
-- {columns}: rows.JOB_COLUMNS_WITH_PAYLOAD, the claimed rows read in full.
UPDATE jobs SET state = 'running', fence = fence + 1, lease_id = ?, lease_expires_at_ms = ?,
    worker_id = ?, attempted_at_ms = ?, cancel_requested = 0
WHERE id IN ({marks}) AND state = 'available'
RETURNING {columns}

-- name: update_deficit
UPDATE partitions SET deficit = ? WHERE queue = ? AND partition_key = ?

-- name: drop_idle_partitions
-- Up to ? rows of partitions with nothing waiting or running and no credit: what
-- admission reads of a partition is only ever of one with jobs waiting, and every change
-- of a partition's counts is an upsert that adds its row again.
DELETE FROM partitions WHERE (queue, partition_key) IN (
    SELECT queue, partition_key FROM partitions
    WHERE waiting = 0 AND running = 0 AND deficit = 0 LIMIT ?)

-- name: update_rr_cursor
UPDATE queues SET rr_cursor = ? WHERE name = ?

-- name: select_oldest_running
SELECT id, errors FROM jobs WHERE queue = ? AND partition_key = ? AND state = 'running'
ORDER BY attempted_at_ms, rowid LIMIT 1{for_update}

-- name: cancel_job
UPDATE jobs SET state = 'cancelled', lease_id = NULL, lease_expires_at_ms = NULL,
    cancel_requested = 1, finalized_at_ms = ?, expires_at_ms = ? + retention_ms, errors = ?
WHERE id = ?

-- name: discard_job
DELETE FROM jobs WHERE id = ?

-- name: select_errors
SELECT errors FROM jobs WHERE id = ?

-- name: explain_job
SELECT state, queue, partition_key, priority, rowid, fingerprint, rate_class, weight,
    scheduled_at_ms, sticky_worker
FROM jobs WHERE id = ?

-- name: queue_paused
SELECT paused FROM queues WHERE name = ?

-- name: partition_counts
SELECT running, waiting FROM partitions WHERE queue = ? AND partition_key = ?

-- name: count_ahead
-- The jobs before this one in its partition's admission order, counted up to a bound.
SELECT count(*) FROM (SELECT 1 FROM jobs WHERE queue = ? AND partition_key = ?
    AND state = 'available' AND (priority > ? OR (priority = ? AND rowid < ?)) LIMIT 10001)
    AS ahead
