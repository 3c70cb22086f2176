-- headgate_enqueue_keyed_v1: POST /api/v1/jobs on PostgreSQL as one autocommit statement
-- (headgate/adapters/postgres/keyed.py): the Idempotency-Key's lock, its record, and,
-- when the key has no live record, the enqueue (headgate_enqueue_v3) with the answer to
-- replay, all committed together.
--
-- One statement because each one costs the client a round trip and ~100 µs of driver
-- CPU in the request's thread, which shares its process's GIL with every other request;
-- the shared path's BEGIN, lock, record read, enqueue and COMMIT were five.
--
-- The lock comes first: each statement of a PL/pgSQL function takes its snapshot when it
-- starts, so the record read after it sees what the key's previous holder committed.
-- A live record (a completed answer, or another request still holding the key) comes
-- back in the rec_* columns and nothing is written. Otherwise the enqueue's result
-- comes back; its answer is stored only for outcome 'ok', so a refusal or a held
-- unique key stores nothing, as on the shared path. p_purge_limit > 0 also deletes that
-- many expired records (the caller asks on one request in PURGE_EVERY).

CREATE OR REPLACE FUNCTION headgate_enqueue_keyed_v1(
    p_scope_key TEXT, p_request_hash TEXT, p_stale_ms BIGINT, p_purge_limit INTEGER,
    p_status INTEGER, p_answer_headers TEXT, p_body BYTEA, p_ttl_ms BIGINT,
    p_id TEXT[], p_kind TEXT[], p_schema_version INTEGER[], p_payload BYTEA[],
    p_fingerprint TEXT[], p_queue TEXT[], p_priority INTEGER[], p_partition_key TEXT[],
    p_rate_class TEXT[], p_weight BIGINT[], p_scheduled_at_ms BIGINT[],
    p_max_attempts INTEGER[], p_retention_ms BIGINT[], p_tags TEXT[], p_sticky_worker TEXT[],
    p_headers TEXT[], p_periodic_schedule_id TEXT[], p_periodic_tick_ms BIGINT[],
    p_pending BOOLEAN[], p_unique_key BYTEA[], p_unique_window_ms BIGINT[],
    p_unique_replace INTEGER[], p_unique_debounce_ms BIGINT[], p_origin TEXT,
    OUT rec_request_hash TEXT, OUT rec_state TEXT, OUT rec_status INTEGER,
    OUT rec_headers TEXT, OUT rec_body BYTEA,
    OUT outcome TEXT, OUT subject TEXT, OUT queue_limit BIGINT, OUT current BIGINT,
    OUT incoming BIGINT, OUT received_queues TEXT[], OUT duplicate_id TEXT,
    OUT replaced BOOLEAN, OUT inserted INTEGER
) LANGUAGE plpgsql AS $$
DECLARE
    now_ms BIGINT;
    created BIGINT;
    expires BIGINT;
BEGIN
    -- The same lock as the shared path's (idempotency.KEY_LOCK, over the key's UTF-8).
    PERFORM pg_advisory_xact_lock(hashtextextended(
        encode(convert_to(p_scope_key, 'UTF8'), 'hex'), headgate_key_lock_seed()));
    now_ms := headgate_now_ms();

    SELECT k.request_hash, k.state, k.status, k.headers, k.body, k.created_at_ms,
           k.expires_at_ms
    INTO rec_request_hash, rec_state, rec_status, rec_headers, rec_body, created, expires
    FROM api_idempotency k WHERE k.scope_key = p_scope_key FOR UPDATE;
    -- Live unless expired, or in progress for a request that died (idempotency.STALE_MS).
    IF FOUND AND expires > now_ms
       AND NOT (rec_state = 'in_progress' AND created <= now_ms - p_stale_ms) THEN
        RETURN;
    END IF;
    rec_request_hash := NULL;
    rec_state := NULL;
    rec_status := NULL;
    rec_headers := NULL;
    rec_body := NULL;

    IF p_purge_limit > 0 THEN
        DELETE FROM api_idempotency WHERE scope_key IN (
            SELECT scope_key FROM api_idempotency WHERE expires_at_ms <= now_ms
            LIMIT p_purge_limit);
    END IF;

    SELECT e.outcome, e.subject, e.queue_limit, e.current, e.incoming, e.received_queues,
           e.duplicate_id, e.replaced, e.inserted
    INTO outcome, subject, queue_limit, current, incoming, received_queues,
         duplicate_id, replaced, inserted
    FROM headgate_enqueue_v3(p_id, p_kind, p_schema_version, p_payload, p_fingerprint,
        p_queue, p_priority, p_partition_key, p_rate_class, p_weight, p_scheduled_at_ms,
        p_max_attempts, p_retention_ms, p_tags, p_sticky_worker, p_headers,
        p_periodic_schedule_id, p_periodic_tick_ms, p_pending, p_unique_key,
        p_unique_window_ms, p_unique_replace, p_unique_debounce_ms, p_origin) e;

    IF outcome = 'ok' THEN
        INSERT INTO api_idempotency (scope_key, request_hash, state, status, headers, body,
                                     created_at_ms, expires_at_ms)
        VALUES (p_scope_key, p_request_hash, 'done', p_status, p_answer_headers, p_body,
                now_ms, now_ms + p_ttl_ms)
        ON CONFLICT (scope_key) DO UPDATE SET request_hash = excluded.request_hash,
            state = 'done', status = excluded.status, headers = excluded.headers,
            body = excluded.body, created_at_ms = excluded.created_at_ms,
            expires_at_ms = excluded.expires_at_ms;
    END IF;
END
$$;

-- headgate_enqueue_keyed_many_v1: concurrent `POST /api/v1/jobs` requests of one server
-- process in one autocommit statement (keyed.py's KeyedBatcher): each item is one
-- request, decided by headgate_enqueue_keyed_v1 as if alone but after the items before
-- it, and answered by its own row (`ord`: its position). Every enqueue takes its queue's
-- lock to the commit and every NOTIFY PostgreSQL's database-wide commit lock, so requests
-- committed one by one queue behind each other's WAL flush; here the batch shares one.
-- The caller passes the items sorted by queue, so a batch takes its queue locks in the
-- order admission does. A refusal, a held unique key or a live record concerns its own
-- item; an error aborts the whole statement, and the caller then sends each item alone.
CREATE OR REPLACE FUNCTION headgate_enqueue_keyed_many_v1(
    p_scope_key TEXT[], p_request_hash TEXT[], p_stale_ms BIGINT, p_purge_limit INTEGER,
    p_status INTEGER[], p_answer_headers TEXT[], p_body BYTEA[], p_ttl_ms BIGINT[],
    p_id TEXT[], p_kind TEXT[], p_schema_version INTEGER[], p_payload BYTEA[],
    p_fingerprint TEXT[], p_queue TEXT[], p_priority INTEGER[], p_partition_key TEXT[],
    p_rate_class TEXT[], p_weight BIGINT[], p_scheduled_at_ms BIGINT[],
    p_max_attempts INTEGER[], p_retention_ms BIGINT[], p_tags TEXT[], p_sticky_worker TEXT[],
    p_headers TEXT[], p_periodic_schedule_id TEXT[], p_periodic_tick_ms BIGINT[],
    p_pending BOOLEAN[], p_unique_key BYTEA[], p_unique_window_ms BIGINT[],
    p_unique_replace INTEGER[], p_unique_debounce_ms BIGINT[], p_origin TEXT
) RETURNS TABLE (
    ord INTEGER, rec_request_hash TEXT, rec_state TEXT, rec_status INTEGER,
    rec_headers TEXT, rec_body BYTEA, outcome TEXT, subject TEXT, queue_limit BIGINT,
    current BIGINT, incoming BIGINT, received_queues TEXT[], duplicate_id TEXT,
    replaced BOOLEAN, inserted INTEGER
) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. cardinality(p_scope_key) LOOP
        ord := i;
        SELECT k.rec_request_hash, k.rec_state, k.rec_status, k.rec_headers, k.rec_body,
               k.outcome, k.subject, k.queue_limit, k.current, k.incoming,
               k.received_queues, k.duplicate_id, k.replaced, k.inserted
        INTO rec_request_hash, rec_state, rec_status, rec_headers, rec_body, outcome,
             subject, queue_limit, current, incoming, received_queues, duplicate_id,
             replaced, inserted
        FROM headgate_enqueue_keyed_v1(
            p_scope_key[i], p_request_hash[i], p_stale_ms,
            CASE WHEN i = 1 THEN p_purge_limit ELSE 0 END, p_status[i],
            p_answer_headers[i], p_body[i], p_ttl_ms[i],
            ARRAY[p_id[i]], ARRAY[p_kind[i]], ARRAY[p_schema_version[i]],
            ARRAY[p_payload[i]], ARRAY[p_fingerprint[i]], ARRAY[p_queue[i]],
            ARRAY[p_priority[i]], ARRAY[p_partition_key[i]], ARRAY[p_rate_class[i]],
            ARRAY[p_weight[i]], ARRAY[p_scheduled_at_ms[i]], ARRAY[p_max_attempts[i]],
            ARRAY[p_retention_ms[i]], ARRAY[p_tags[i]], ARRAY[p_sticky_worker[i]],
            ARRAY[p_headers[i]], ARRAY[p_periodic_schedule_id[i]],
            ARRAY[p_periodic_tick_ms[i]], ARRAY[p_pending[i]], ARRAY[p_unique_key[i]],
            ARRAY[p_unique_window_ms[i]], ARRAY[p_unique_replace[i]],
            ARRAY[p_unique_debounce_ms[i]], p_origin) AS k;
        RETURN NEXT;
    END LOOP;
END
$$;
