-- Acks, leases and the sweeps that move jobs on store time (lifecycle.py).

-- name: select_for_ack
SELECT state, lease_id, fence, attempt, max_attempts, crash_attempt, retention_ms, queue,
       rate_class, errors, worker_id
FROM jobs WHERE id = ?{for_update}

-- name: select_for_acks
-- In id order, the order every multi-job writer locks rows in.
SELECT id, state, lease_id, fence, attempt, max_attempts, crash_attempt, retention_ms, queue,
       rate_class, errors, worker_id
FROM jobs WHERE id IN ({marks}) ORDER BY id{for_update}

-- name: lock_ack_classes
-- The class rows an ack batch may write, locked in name order ({name_order}: by code
-- point, as admission takes them) before it writes any: those in {written} (a throttle's
-- cut, a rate-limited ack's drain) and, of the others (its successes' classes), the
-- adaptive ones a raise may write.
SELECT name FROM rate_classes
WHERE name IN ({marks}) AND (name IN ({written}) OR adaptive_min IS NOT NULL)
ORDER BY {name_order}{for_update}

-- name: delete_jobs
DELETE FROM jobs WHERE id IN ({marks})

-- name: update_jobs
-- One planned change for many jobs; {assignments}: `column = ?` for each key of the
-- plan (columns named in lifecycle.py).
UPDATE jobs SET {assignments} WHERE id IN ({marks})

-- name: update_job
UPDATE jobs SET {assignments} WHERE id = ?

-- name: complete_plain
-- Plain successes checked and applied by the statement itself (see
-- ack_plain_successes): each ack's row must still be running under its lease and fence;
-- RETURNING names the rows it changed, the rest are lost leases. The running state is
-- tested as `state || ''` in this and the other statements that find a running job by
-- id: with `state = 'running'` the planner may read the job through the partial index
-- jobs_running, which its statistics call tiny, and a generic plan then scans every
-- entry of that index (on PostgreSQL, under a held snapshot, every claim's since).
UPDATE jobs SET state = ?, lease_id = NULL, lease_expires_at_ms = NULL,
    finalized_at_ms = ?, expires_at_ms = ? + retention_ms
WHERE id IN ({marks}) AND state || '' = 'running' AND retention_ms > 0
  AND (id, lease_id, fence) IN (VALUES {rows})
RETURNING id, queue

-- name: delete_plain
DELETE FROM jobs
WHERE id IN ({marks}) AND state || '' = 'running' AND retention_ms = 0
  AND (id, lease_id, fence) IN (VALUES {rows})
RETURNING id, queue

-- name: renew
UPDATE jobs SET lease_expires_at_ms = ?
WHERE id = ? AND lease_id = ? AND fence = ? AND state || '' = 'running'

-- name: write_progress
UPDATE jobs SET progress_current = ?, progress_total = ?, progress_message = ?,
    progress_fence = fence, progress_updated_at_ms = ?
WHERE id = ? AND lease_id = ? AND fence = ? AND state || '' = 'running'

-- name: write_output
UPDATE jobs SET output = ?, output_schema_version = ?, output_fence = fence,
    output_updated_at_ms = ?
WHERE id = ? AND lease_id = ? AND fence = ? AND state || '' = 'running'

-- name: select_expired
SELECT id, crash_attempt, fingerprint, kind, worker_id, errors, queue, retention_ms, fence
FROM jobs WHERE state = 'running' AND lease_expires_at_ms >= ? AND lease_expires_at_ms < ?
ORDER BY lease_expires_at_ms LIMIT ?{skip_locked}

-- name: promote_due
-- {in_queues}: "" or " AND queue IN (?, …)"; the outer test is repeated on the row as
-- it changes.
UPDATE jobs SET state = 'available'
WHERE id IN (SELECT id FROM jobs WHERE state IN ('scheduled', 'retryable')
             AND scheduled_at_ms <= ?{in_queues} ORDER BY scheduled_at_ms LIMIT ?{skip_locked})
  AND state IN ('scheduled', 'retryable') AND scheduled_at_ms <= ?
RETURNING queue

-- name: probe_due
SELECT 1 FROM jobs WHERE state IN ('scheduled', 'retryable') AND scheduled_at_ms <= ?{in_queues}
LIMIT 1

-- name: due_queues
SELECT DISTINCT queue FROM (SELECT queue FROM jobs WHERE state IN ('scheduled', 'retryable')
    AND scheduled_at_ms <= ? ORDER BY scheduled_at_ms LIMIT ?) AS due

-- name: expired_queues
SELECT DISTINCT queue FROM (SELECT queue FROM jobs WHERE state = 'running'
    AND lease_expires_at_ms >= ? AND lease_expires_at_ms < ?
    ORDER BY lease_expires_at_ms LIMIT ?) AS expired

-- name: evict
DELETE FROM jobs WHERE id IN (
    SELECT id FROM jobs WHERE expires_at_ms <= ?
    AND state IN ('completed', 'archived', 'cancelled', 'undecodable') LIMIT ?)

-- name: upsert_quarantine
INSERT INTO quarantine (fingerprint, kind, crash_count, quarantined_at_ms, reason)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (fingerprint) DO UPDATE SET crash_count = excluded.crash_count,
    quarantined_at_ms = excluded.quarantined_at_ms, reason = excluded.reason

-- name: select_rate_limit
SELECT limit_per_window, window_ms FROM rate_classes WHERE name = ?

-- name: drain_rate_class
UPDATE rate_classes SET tokens = ?, refilled_at_ms = ? WHERE name = ?
