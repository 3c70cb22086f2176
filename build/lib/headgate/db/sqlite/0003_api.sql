-- headgate schema 3: what the control API (/api/v1) keeps in the database, so it
-- survives restarts and is shared by every serve process on one database:
-- bulk operations, stored idempotent responses, and sampled queue memory.

-- One row per /jobs/bulk request or forced queue delete. The operations duty advances
-- `cursor` (the last job id handled, keyset order) one bounded batch at a time.
CREATE TABLE operations (
    id TEXT PRIMARY KEY,
    action TEXT NOT NULL,
    selector TEXT NOT NULL,
    dry_run INTEGER NOT NULL,
    status TEXT NOT NULL,
    affected INTEGER NOT NULL DEFAULT 0,
    total_estimated INTEGER,
    total_capped INTEGER NOT NULL DEFAULT 0,
    cursor TEXT NOT NULL DEFAULT '',
    error TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    finished_at_ms INTEGER
);
CREATE INDEX operations_active ON operations (created_at_ms)
    WHERE status IN ('queued', 'running');

-- The first successful response to a mutating request, per (caller, method, path, key).
-- scope_key is a SHA-256 of those four: no token and no key is stored in clear.
CREATE TABLE api_idempotency (
    scope_key TEXT PRIMARY KEY,
    request_hash TEXT NOT NULL,
    state TEXT NOT NULL,
    status INTEGER,
    headers TEXT,
    body BLOB,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);
CREATE INDEX api_idempotency_expiry ON api_idempotency (expires_at_ms);

-- Estimated bytes per queue from a bounded sample (POST /queues/actions/sample-memory).
CREATE TABLE queue_memory (
    queue TEXT PRIMARY KEY,
    memory_bytes INTEGER NOT NULL,
    sampled_jobs INTEGER NOT NULL,
    sampled_at_ms INTEGER NOT NULL
);
