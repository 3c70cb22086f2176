-- PostgresStore's own statements (store.py).

-- name: settle_partitions
SELECT headgate_settle_partitions_v1(?)

-- name: roll_counters
SELECT headgate_roll_counters_v1(?)

-- name: transaction_horizon
-- The oldest open transaction of any other client session on this database and the age
-- of the oldest snapshot: what keeps vacuum from removing dead row versions.
SELECT (extract(epoch FROM clock_timestamp() - min(xact_start)) * 1000)::bigint,
       max(age(backend_xmin))
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend' AND state <> 'idle' AND xact_start IS NOT NULL
