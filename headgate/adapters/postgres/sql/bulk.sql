-- A batch enqueue by COPY (bulk.py): the function's early exit for batches.

-- name: lock_and_check
-- The queues' locks in the order every enqueue and admission takes them (sorted, "C"),
-- then whether the batch may skip the function: the function's own gate
-- (headgate_enqueue_gate_v1, db/postgres/functions/checks.sql; the queues distinct).
SELECT headgate_now_ms(), gate.plain
FROM (SELECT count(headgate_lock_queue_v1(u.name))
      FROM unnest(%(queues)s::text[]) AS u(name)) AS locked,
     headgate_enqueue_gate_v1(%(queues)s::text[], %(fingerprints)s::text[]) AS gate

-- name: copy_jobs
-- The rows SQLite's batch inserts (enqueue_rows.insert_row); the insert trigger counts
-- them and their arrivals.
COPY jobs (id, kind, schema_version, payload, fingerprint, queue, priority, partition_key,
    rate_class, weight, state, scheduled_at_ms, max_attempts, retention_ms, tags,
    sticky_worker, headers, enqueued_at_ms, periodic_schedule_id, periodic_tick_ms,
    was_pending) FROM STDIN

-- name: wake
-- The function's wake-up NOTIFY (checks.sql), sent with the COMMIT.
SELECT headgate_wake_v1(%(origin)s::text, %(queues)s::text[])
