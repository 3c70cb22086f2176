-- Stored responses for the control API's Idempotency-Key (idempotency.py).

-- name: select_key
SELECT request_hash, state, status, headers, body, created_at_ms, expires_at_ms
FROM api_idempotency WHERE scope_key = ?{for_update}

-- name: upsert_in_progress
INSERT INTO api_idempotency (scope_key, request_hash, state, status, headers, body,
    created_at_ms, expires_at_ms)
VALUES (?, ?, 'in_progress', NULL, NULL, NULL, ?, ?)
ON CONFLICT (scope_key) DO UPDATE SET request_hash = excluded.request_hash,
    state = 'in_progress', status = NULL, headers = NULL, body = NULL,
    created_at_ms = excluded.created_at_ms, expires_at_ms = excluded.expires_at_ms

-- name: purge
-- A bounded number of expired keys (an expired key is never answered: `peek` reads the
-- expiry).
DELETE FROM api_idempotency WHERE scope_key IN (SELECT scope_key FROM
    api_idempotency WHERE expires_at_ms <= ? LIMIT ?)

-- name: key_lock
-- PostgreSQL: the key's lock (a missing row cannot be locked).
SELECT pg_advisory_xact_lock(hashtextextended(encode(?, 'hex'), headgate_key_lock_seed()))

-- name: purge_and_lock
-- The purge and the key's lock in one round trip: {purge} and {key_lock} are the
-- statements above. What the key's holder committed is read by the next statement,
-- whose snapshot is taken after the lock.
WITH purged AS ({purge} RETURNING 1) {key_lock}, (SELECT count(*) FROM purged)

-- name: upsert_done
-- A stored answer replaces an expired or abandoned record of the key.
INSERT INTO api_idempotency (scope_key, request_hash, state, status, headers, body,
    created_at_ms, expires_at_ms)
VALUES (?, ?, 'done', ?, ?, ?, ?, ?)
ON CONFLICT (scope_key) DO UPDATE SET request_hash = excluded.request_hash,
    state = 'done', status = excluded.status, headers = excluded.headers,
    body = excluded.body, created_at_ms = excluded.created_at_ms,
    expires_at_ms = excluded.expires_at_ms

-- name: complete
UPDATE api_idempotency SET state = 'done', status = ?, headers = ?, body = ?
WHERE scope_key = ?

-- name: abort
DELETE FROM api_idempotency WHERE scope_key = ? AND state = 'in_progress'

-- name: forget
DELETE FROM api_idempotency WHERE scope_key = ?
