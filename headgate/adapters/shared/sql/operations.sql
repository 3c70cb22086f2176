-- Bulk operations and a forced queue delete (operations.py). {where} in these
-- statements is operations._where's: literal columns and placeholders joined by AND,
-- "1 = 1" for none and "1 = 0" for a selector that matches nothing.

-- name: insert_op
INSERT INTO operations (id, action, selector, dry_run, status, affected, total_estimated,
    total_capped, cursor, error, created_at_ms, updated_at_ms, finished_at_ms)
VALUES (?, ?, ?, ?, ?, 0, ?, ?, '', NULL, ?, ?, ?)

-- name: select_op
-- {columns}: operations.OP_COLUMNS, the order `get` reads.
SELECT {columns} FROM operations WHERE id = ?

-- name: select_active
SELECT id, action, selector, cursor, status FROM operations
WHERE status IN ('queued', 'running') ORDER BY created_at_ms, id LIMIT 1{skip_locked}

-- name: active_id
SELECT id FROM operations WHERE status IN ('queued', 'running')
ORDER BY created_at_ms, id LIMIT 1

-- name: count_states
-- An exact count from the maintained counters; {where}: "" or " AND queue = ?".
SELECT coalesce(sum(n), 0) FROM queue_counts WHERE state IN ({marks}){where}

-- name: count_selected
-- A count that stops at the cap (the caller asks for one more than it).
SELECT count(*) FROM (SELECT 1 FROM jobs WHERE {where} LIMIT ?) s

-- name: next_selected
SELECT id, queue FROM jobs WHERE {where} AND id > ? ORDER BY id LIMIT ?

-- name: next_selected_in
-- One (queue, state) walk over (queue, state, id) (operations._next_rows).
SELECT id, queue FROM jobs WHERE queue = ? AND state = ? AND {where}
    AND id > ? ORDER BY id LIMIT ?

-- name: delete_jobs
DELETE FROM jobs WHERE id IN ({marks})

-- name: advance_op
UPDATE operations SET status = ?, affected = affected + ?, cursor = ?,
    updated_at_ms = ?, finished_at_ms = ?
WHERE id = ?

-- name: fail_op
UPDATE operations SET status = 'failed', error = ?, updated_at_ms = ?,
    finished_at_ms = ?
WHERE id = ?

-- name: queue_total
SELECT coalesce(sum(n), 0) FROM queue_counts WHERE queue = ?

-- name: drop_queue_row
DELETE FROM queues WHERE name = ?

-- name: drop_queue_counts
DELETE FROM queue_counts WHERE queue = ?

-- name: drop_queue_partitions
DELETE FROM partitions WHERE queue = ?

-- name: drop_queue_limits
DELETE FROM concurrency_limits WHERE queue = ?

-- name: drop_queue_memory
DELETE FROM queue_memory WHERE queue = ?

-- name: queue_exists
SELECT 1 FROM queues WHERE name = ?

-- name: pending_of_action
SELECT id, selector FROM operations WHERE action = ? AND status IN ('queued', 'running')

-- name: stop_queue
UPDATE queues SET paused = 1, max_unfinished_jobs = 0 WHERE name = ?
