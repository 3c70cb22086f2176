-- Operator control (control.py): job actions, queue and policy settings, workers and
-- duty leases.

-- name: rate_class_waiting
-- Available jobs naming a rate class, counted up to a bound (rate_class_jobs index).
SELECT count(*) FROM (
    SELECT 1 FROM jobs WHERE rate_class = ? AND rate_class <> '' AND state = 'available'
    LIMIT 100000
) AS waiting

-- name: select_job_state
SELECT state, queue, attempt, max_attempts, retention_ms FROM jobs WHERE id = ?{for_update}

-- name: ensure_queue
INSERT INTO queues (name, created_at_ms) VALUES (?, ?) ON CONFLICT (name) DO NOTHING

-- name: operator_retry
UPDATE jobs SET state = ?, scheduled_at_ms = ?, finalized_at_ms = NULL,
    expires_at_ms = NULL, cancel_requested = 0, max_attempts = ?
WHERE id = ?

-- name: operator_cancel
UPDATE jobs SET state = ?, lease_id = NULL, lease_expires_at_ms = NULL,
    cancel_requested = ?, finalized_at_ms = ?, expires_at_ms = ? + retention_ms
WHERE id = ?

-- name: delete_job
DELETE FROM jobs WHERE id = ?

-- name: promote_job
UPDATE jobs SET state = ?,
    scheduled_at_ms = CASE WHEN scheduled_at_ms < ? THEN scheduled_at_ms ELSE ? END
WHERE id = ?

-- name: reschedule_job
UPDATE jobs SET scheduled_at_ms = ? WHERE id = ?

-- name: edit_payload
UPDATE jobs SET payload = ?, schema_version = ?, fingerprint = ? WHERE id = ?

-- name: delete_quarantine_entry
DELETE FROM quarantine WHERE fingerprint = ?

-- name: release_quarantined
UPDATE jobs SET state = ?, crash_attempt = 0, finalized_at_ms = NULL,
    expires_at_ms = NULL, scheduled_at_ms = ?
WHERE fingerprint = ? AND state = 'quarantined'
RETURNING queue

-- name: set_queue_column
-- {column}: paused, weight or max_unfinished_jobs (control.SET_QUEUE, one statement each).
UPDATE queues SET {column} = ? WHERE name = ?

-- name: upsert_rate_class
-- The adaptive columns are always written: NULL for a class that is not adaptive, so a
-- PUT without `adaptive` turns adaptation off. throttles starts over with every PUT.
INSERT INTO rate_classes (name, limit_per_window, window_ms, burst, paused, tokens,
    refilled_at_ms, adaptive_min, adaptive_max, adaptive_factor, adaptive_step,
    base_limit, base_burst, last_decrease_ms, last_increase_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET
    limit_per_window = excluded.limit_per_window, window_ms = excluded.window_ms,
    burst = excluded.burst, paused = excluded.paused, tokens = excluded.tokens,
    refilled_at_ms = excluded.refilled_at_ms, throttles = 0,
    adaptive_min = excluded.adaptive_min, adaptive_max = excluded.adaptive_max,
    adaptive_factor = excluded.adaptive_factor, adaptive_step = excluded.adaptive_step,
    base_limit = excluded.base_limit, base_burst = excluded.base_burst,
    last_decrease_ms = excluded.last_decrease_ms, last_increase_ms = excluded.last_increase_ms

-- name: upsert_concurrency_limit
INSERT INTO concurrency_limits (name, queue, max_concurrent, on_saturated)
VALUES (?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET queue = excluded.queue,
    max_concurrent = excluded.max_concurrent, on_saturated = excluded.on_saturated

-- name: rate_class_exists
SELECT 1 FROM rate_classes WHERE name = ?

-- name: delete_rate_class
DELETE FROM rate_classes WHERE name = ?

-- name: concurrency_limit_queue
SELECT queue FROM concurrency_limits WHERE name = ?

-- name: queue_governed
-- Jobs running or waiting in a queue, from the maintained queue_counts, not from jobs.
SELECT coalesce(sum(n), 0) FROM queue_counts WHERE queue = ?
    AND state IN ('available', 'running')

-- name: delete_concurrency_limit
DELETE FROM concurrency_limits WHERE name = ?

-- name: upsert_worker
INSERT INTO workers (worker_id, host, pid, queues, concurrency, inflight, polls, empty_polls,
    started_at_ms, heartbeat_at_ms, status, agent, kinds)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (worker_id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
    queues = excluded.queues, concurrency = excluded.concurrency, inflight = excluded.inflight,
    polls = excluded.polls, empty_polls = excluded.empty_polls,
    heartbeat_at_ms = excluded.heartbeat_at_ms, status = excluded.status,
    agent = excluded.agent, kinds = excluded.kinds

-- name: select_pending_signal
SELECT pending_signal FROM workers WHERE worker_id = ?

-- name: clear_pending_signal
UPDATE workers SET pending_signal = NULL WHERE worker_id = ?

-- name: select_running_check
-- Whether a worker's running claims are still theirs (see heartbeat).
SELECT id, state, cancel_requested, fence FROM jobs WHERE id IN ({marks})

-- name: signal_worker
UPDATE workers SET pending_signal = ? WHERE worker_id = ?

-- name: claim_duty
-- Taken when free, expired, or already this holder's.
INSERT INTO duties (name, holder, expires_at_ms) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at_ms = excluded.expires_at_ms
WHERE duties.holder = excluded.holder OR duties.expires_at_ms <= ?

-- name: select_duty_holder
SELECT holder FROM duties WHERE name = ?

-- name: renew_duty
-- Only an unexpired lease of the holder (see renew_duty).
UPDATE duties SET expires_at_ms = ? WHERE name = ? AND holder = ? AND expires_at_ms > ?

-- name: release_duty
UPDATE duties SET expires_at_ms = 0 WHERE name = ? AND holder = ?
