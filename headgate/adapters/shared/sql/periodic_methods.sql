-- The periodic store methods (periodic_methods.py); the rest of their SQL is periodic.py's.

-- name: existing_ids
-- Which of a tick's job ids exist before its enqueue: what it then inserted.
SELECT id FROM jobs WHERE id IN ({marks})
