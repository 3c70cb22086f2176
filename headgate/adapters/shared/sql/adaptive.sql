-- Adaptive rate classes (adaptive.py): the AIMD rules applied to a class's row.

-- name: select_class
-- {columns}: adaptive.COLUMNS, the order SELECT_CLASS rows are read in.
SELECT {columns} FROM rate_classes WHERE name = ?{for_update}

-- name: rising
-- The classes among `names` that may rise now: adaptive, below their max, and neither
-- raised nor cut within their window. Locked (the dialect's FOR UPDATE) in name order, so
-- the tokens a raise settles are the ones an admission left, not a copy from before it;
-- {name_order}: the name by code point, the order admission takes class rows in.
SELECT name, limit_per_window, window_ms, burst, paused, tokens, refilled_at_ms, adaptive_max,
       adaptive_step, base_limit, base_burst, last_increase_ms
FROM rate_classes
WHERE name IN ({marks}) AND adaptive_min IS NOT NULL AND adaptive_step > 0
  AND limit_per_window < adaptive_max
  AND coalesce(last_increase_ms, 0) <= ? - window_ms
  AND coalesce(last_decrease_ms, 0) <= ? - window_ms
ORDER BY {name_order}{for_update}

-- name: raise
-- A compare-and-set on the limit and last_increase_ms: of two concurrent successes one
-- moves it.
UPDATE rate_classes SET limit_per_window = ?, burst = ?, tokens = ?, refilled_at_ms = ?,
    last_increase_ms = ?
WHERE name = ? AND limit_per_window = ? AND coalesce(last_increase_ms, -1) = ?

-- name: cut
UPDATE rate_classes SET limit_per_window = ?, burst = ?, tokens = ?, refilled_at_ms = ?,
    last_decrease_ms = ?, throttles = 0
WHERE name = ?

-- name: count_throttle
UPDATE rate_classes SET throttles = throttles + 1 WHERE name = ?

-- name: insert_history
INSERT INTO rate_class_history (name, at_ms, limit_per_window, window_ms, change, throttles)
VALUES (?, ?, ?, ?, ?, ?)

-- name: newest_history
SELECT id, at_ms, change FROM rate_class_history WHERE name = ? ORDER BY id DESC LIMIT 1

-- name: move_increase
UPDATE rate_class_history SET at_ms = ?, limit_per_window = ? WHERE id = ?

-- name: history_since
SELECT at_ms, limit_per_window, window_ms, change, throttles FROM rate_class_history
WHERE name = ? AND at_ms >= ? ORDER BY id DESC LIMIT ?

-- name: last_cut
SELECT at_ms, limit_per_window, throttles FROM rate_class_history
WHERE name = ? AND change = 'decrease' ORDER BY id DESC LIMIT 1

-- name: adaptive_names
SELECT name FROM rate_classes WHERE adaptive_min IS NOT NULL

-- name: job_rate_class
SELECT rate_class FROM jobs WHERE id = ?
