-- Group commit (combining.py): each action of a shared write transaction in its own
-- savepoint, released when it returns, rolled back to when it raises.

-- name: savepoint
SAVEPOINT combined_action

-- name: release
RELEASE combined_action

-- name: rollback_to
ROLLBACK TO combined_action
