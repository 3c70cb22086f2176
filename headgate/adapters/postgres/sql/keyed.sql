-- POST /api/v1/jobs on PostgreSQL in one statement (keyed.py).

-- name: enqueue_keyed
-- The key's lock, its record, the enqueue and the answer to replay in one call of
-- headgate_enqueue_keyed_v1 (headgate/db/postgres/functions/keyed.sql). {one_args}:
-- enqueue.sql's one_args, the job's arguments.
SELECT rec_request_hash, rec_state, rec_status, rec_headers, rec_body,
       outcome, subject, queue_limit, current, incoming, received_queues, duplicate_id,
       replaced, inserted
FROM headgate_enqueue_keyed_v1(%b::text, %b::text, %b::bigint, %b::integer, %b::integer,
    %b::text, %b::bytea, %b::bigint, {one_args})
