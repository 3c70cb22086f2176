-- Periodic schedules, their events, run-now records and the duties' maintenance writes
-- (periodic.py). {columns}: periodic.SCHEDULE_COLUMNS, the order periodic._row reads.

-- name: select_schedule
SELECT {columns} FROM schedules WHERE id = ?

-- name: list_schedules
SELECT {columns} FROM schedules ORDER BY id

-- name: upsert_schedule
-- {marks}: one placeholder per column. A conflict keeps the row's created_at_ms and
-- last_enqueued_ms.
INSERT INTO schedules ({columns})
VALUES ({marks})
ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, payload = excluded.payload,
    queue = excluded.queue, partition_key = excluded.partition_key,
    rate_class = excluded.rate_class, priority = excluded.priority,
    max_attempts = excluded.max_attempts, retention_ms = excluded.retention_ms,
    spec = excluded.spec, next_run_ms = excluded.next_run_ms,
    on_missed = excluded.on_missed, backfill_limit = excluded.backfill_limit,
    paused = excluded.paused, updated_at_ms = excluded.updated_at_ms

-- name: delete_schedule
DELETE FROM schedules WHERE id = ?

-- name: delete_schedule_runs
DELETE FROM schedule_runs WHERE schedule_id = ?

-- name: due_schedules
SELECT {columns} FROM schedules WHERE paused = 0 AND next_run_ms <= ?
ORDER BY next_run_ms LIMIT ?

-- name: insert_event
INSERT INTO schedule_events (schedule_id, tick_ms, job_id, outcome, reason, recorded_at_ms)
VALUES (?, ?, ?, ?, ?, ?)

-- name: prune_events
-- All but the schedule's newest events (the OFFSET is how many it keeps).
DELETE FROM schedule_events WHERE schedule_id = ? AND event_id <= (
    SELECT event_id FROM schedule_events WHERE schedule_id = ?
    ORDER BY event_id DESC LIMIT 1 OFFSET ?)

-- name: list_events
SELECT event_id, schedule_id, tick_ms, job_id, outcome, reason, recorded_at_ms
FROM schedule_events WHERE schedule_id = ? AND event_id < ?
ORDER BY event_id DESC LIMIT ?

-- name: advance
-- A compare-and-set on spec and next_run_ms (see periodic.advance).
UPDATE schedules SET next_run_ms = ?,
    last_enqueued_ms = CASE WHEN ? = 1 THEN ? ELSE last_enqueued_ms END
WHERE id = ? AND spec = ? AND next_run_ms = ?

-- name: park
UPDATE schedules SET paused = 1, updated_at_ms = ?
WHERE id = ? AND spec = ? AND next_run_ms = ? AND paused = 0

-- name: touch_enqueued
UPDATE schedules SET last_enqueued_ms = ? WHERE id = ?

-- name: find_run
SELECT job_id FROM schedule_runs WHERE schedule_id = ? AND idempotency_key = ?
    AND created_at_ms > ?

-- name: forget_old_runs
DELETE FROM schedule_runs WHERE created_at_ms <= ?

-- name: insert_run
INSERT INTO schedule_runs (schedule_id, idempotency_key, job_id, created_at_ms)
VALUES (?, ?, ?, ?) ON CONFLICT (schedule_id, idempotency_key) DO NOTHING

-- name: select_run
SELECT job_id FROM schedule_runs WHERE schedule_id = ? AND idempotency_key = ?

-- name: forget_workers
DELETE FROM workers WHERE heartbeat_at_ms < ?

-- name: unfinished_by_queue
-- {states}: the unfinished states, quoted (periodic._UNFINISHED_MARKS).
SELECT queue, coalesce(sum(CASE WHEN state IN ({states}) THEN n END), 0)
FROM queue_counts GROUP BY queue

-- name: record_depth
INSERT INTO queue_history (queue, bucket_ms, depth) VALUES (?, ?, ?)
ON CONFLICT (queue, bucket_ms) DO UPDATE SET depth = excluded.depth

-- name: prunable_counts
-- {states}: the terminal states but quarantined, quoted (periodic._TERMINAL_MARKS).
SELECT state, count(*) FROM jobs WHERE state IN ({states})
    AND finalized_at_ms < ? GROUP BY state

-- name: prune_terminal
DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state IN ({states})
    AND finalized_at_ms < ? LIMIT ?) RETURNING queue
