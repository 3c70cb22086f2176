-- SqlStore's own statements (store.py); the rest live with the modules it calls.

-- name: ping
-- A primary-key probe: answers once the schema is in place, reads nothing.
SELECT 1 FROM jobs WHERE id = ?

-- name: duty_holders
SELECT name, holder, expires_at_ms FROM duties

-- name: remove_worker
DELETE FROM workers WHERE worker_id = ?
