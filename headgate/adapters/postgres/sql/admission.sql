-- PostgreSQL's admission gate (admission.py): calls of the server-side functions of
-- headgate/db/postgres/functions/admit.sql and explain.sql.

-- name: admit
-- One call decides the acks and the claims. {max_scan}, {scan_extra}, {promote_limit}:
-- admission_limits' bounds, the same numbers SQLite's admission uses.
SELECT * FROM headgate_admit_v3(?, ?::text[], ?::bigint, ?::bigint, ?::bigint, ?, ?::bigint,
    ?::text[], ?::text[], ?::text[], ?::bigint[], ?::bytea[], ?::integer[], ?::boolean,
    {max_scan}, {scan_extra}, {promote_limit})

-- name: explain
SELECT admissible, blocked_by, detail, wait_ms FROM headgate_explain_v1(?, ?)

-- name: lock_counters
-- Before acks that the shared lifecycle applies ahead of the function: claims after acks
-- would take a queue's 'available' counter row while holding its partition rows, and an
-- enqueue takes them the other way round (taken first: one order, no deadlock).
SELECT 1 FROM queue_counts WHERE queue = ANY(?::text[]) AND state = 'available'
ORDER BY queue, state FOR UPDATE
