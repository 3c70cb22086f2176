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

-- name: enqueue_keyed_many
-- Several requests' keys, records, enqueues and answers in one call of
-- headgate_enqueue_keyed_many_v1: each argument an array with one element per request.
SELECT ord, rec_request_hash, rec_state, rec_status, rec_headers, rec_body,
       outcome, subject, queue_limit, current, incoming, received_queues, duplicate_id,
       replaced, inserted
FROM headgate_enqueue_keyed_many_v1(%b::text[], %b::text[], %b::bigint, %b::integer,
    %b::integer[], %b::text[], %b::bytea[], %b::bigint[], %b::text[], %b::text[],
    %b::integer[], %b::bytea[], %b::text[], %b::text[], %b::integer[], %b::text[],
    %b::text[], %b::bigint[], %b::bigint[], %b::integer[], %b::bigint[], %b::text[],
    %b::text[], %b::text[], %b::text[], %b::bigint[], %b::boolean[], %b::bytea[],
    %b::bigint[], %b::integer[], %b::bigint[], %b::text)
ORDER BY ord
