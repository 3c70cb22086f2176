-- WAL checkpoints off the writers' path (checkpoint.py).

-- name: no_busy_wait
PRAGMA busy_timeout = 0

-- name: checkpoint_passive
PRAGMA wal_checkpoint(PASSIVE)

-- name: checkpoint_truncate
PRAGMA wal_checkpoint(TRUNCATE)
