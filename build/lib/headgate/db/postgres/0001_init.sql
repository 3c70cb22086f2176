-- headgate schema 1 for PostgreSQL: the same tables as db/sqlite/0001_init.sql.
-- Counters are maintained by statement-level triggers that aggregate per statement, so
-- a 1000-row batch touches each counter row once, in a fixed (queue, state) order.

CREATE TABLE jobs (
    -- Arrival order; named rowid so the shared SQL orders candidates as on SQLite.
    rowid BIGINT GENERATED ALWAYS AS IDENTITY,
    -- C collation: keyset pages and prefix search compare code points, as SQLite does.
    id TEXT COLLATE "C" PRIMARY KEY,
    kind TEXT COLLATE "C" NOT NULL,
    schema_version INTEGER NOT NULL,
    payload BYTEA NOT NULL,
    fingerprint TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    partition_key TEXT NOT NULL,
    rate_class TEXT NOT NULL,
    weight BIGINT NOT NULL,
    state TEXT NOT NULL,
    scheduled_at_ms BIGINT NOT NULL,
    max_attempts INTEGER NOT NULL,
    retention_ms BIGINT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    sticky_worker TEXT NOT NULL DEFAULT '',
    headers TEXT NOT NULL DEFAULT '{}',
    attempt INTEGER NOT NULL DEFAULT 0,
    crash_attempt INTEGER NOT NULL DEFAULT 0,
    fence BIGINT NOT NULL DEFAULT 0,
    lease_id TEXT,
    lease_expires_at_ms BIGINT,
    worker_id TEXT,
    enqueued_at_ms BIGINT NOT NULL,
    attempted_at_ms BIGINT,
    finalized_at_ms BIGINT,
    expires_at_ms BIGINT,
    errors TEXT NOT NULL DEFAULT '[]',
    periodic_schedule_id TEXT NOT NULL DEFAULT '',
    periodic_tick_ms BIGINT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    was_pending INTEGER NOT NULL DEFAULT 0,
    result BYTEA,
    result_schema_version INTEGER,
    output BYTEA,
    output_schema_version INTEGER,
    output_fence BIGINT,
    output_updated_at_ms BIGINT,
    progress_current BIGINT,
    progress_total BIGINT,
    progress_message TEXT,
    progress_fence BIGINT,
    progress_updated_at_ms BIGINT
);

CREATE INDEX jobs_admit ON jobs (queue, partition_key, priority DESC, rowid)
    WHERE state = 'available';
CREATE INDEX jobs_available_age ON jobs (queue, enqueued_at_ms) WHERE state = 'available';
CREATE INDEX jobs_due ON jobs (scheduled_at_ms) WHERE state IN ('scheduled', 'retryable');
CREATE INDEX jobs_running ON jobs (lease_expires_at_ms) WHERE state = 'running';
CREATE INDEX jobs_running_partition ON jobs (queue, partition_key, attempted_at_ms, rowid)
    WHERE state = 'running';
CREATE INDEX jobs_expiry ON jobs (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
CREATE INDEX jobs_state_id ON jobs (state, id);
CREATE INDEX jobs_queue_state_id ON jobs (queue, state, id);
CREATE INDEX jobs_kind_id ON jobs (kind, id);
CREATE INDEX jobs_fingerprint ON jobs (fingerprint);
CREATE INDEX jobs_periodic ON jobs (periodic_schedule_id, periodic_tick_ms)
    WHERE periodic_schedule_id <> '';
CREATE INDEX jobs_rate_class_available ON jobs (rate_class) WHERE state = 'available';

CREATE TABLE queues (
    name TEXT PRIMARY KEY,
    weight INTEGER NOT NULL DEFAULT 1,
    paused INTEGER NOT NULL DEFAULT 0,
    max_unfinished_jobs BIGINT,
    rr_cursor TEXT NOT NULL DEFAULT '',
    created_at_ms BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE queue_counts (
    queue TEXT NOT NULL,
    state TEXT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (queue, state)
);

CREATE TABLE partitions (
    queue TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    waiting BIGINT NOT NULL DEFAULT 0,
    running BIGINT NOT NULL DEFAULT 0,
    deficit BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, partition_key)
);
CREATE INDEX partitions_waiting ON partitions (queue, partition_key) WHERE waiting > 0;


-- The counter trigger functions and their triggers are in functions/counters.sql.

CREATE TABLE queue_history (
    queue TEXT NOT NULL,
    bucket_ms BIGINT NOT NULL,
    arrived BIGINT NOT NULL DEFAULT 0,
    completed BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    depth BIGINT,
    rejected_rate_class BIGINT NOT NULL DEFAULT 0,
    rejected_concurrency_limit BIGINT NOT NULL DEFAULT 0,
    rejected_quarantine BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, bucket_ms)
);

CREATE TABLE rate_classes (
    name TEXT PRIMARY KEY,
    limit_per_window BIGINT NOT NULL,
    window_ms BIGINT NOT NULL,
    burst BIGINT NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    tokens DOUBLE PRECISION NOT NULL,
    refilled_at_ms BIGINT NOT NULL
);

CREATE TABLE concurrency_limits (
    name TEXT PRIMARY KEY,
    queue TEXT NOT NULL,
    max_concurrent BIGINT NOT NULL,
    on_saturated TEXT NOT NULL
);
CREATE INDEX concurrency_limits_queue ON concurrency_limits (queue);

CREATE TABLE quarantine (
    fingerprint TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    crash_count INTEGER NOT NULL,
    quarantined_at_ms BIGINT NOT NULL,
    reason TEXT NOT NULL
);

CREATE TABLE uniques (
    key BYTEA PRIMARY KEY,
    job_id TEXT NOT NULL,
    expires_at_ms BIGINT
);

CREATE TABLE workers (
    worker_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    queues TEXT NOT NULL,
    concurrency INTEGER NOT NULL,
    inflight INTEGER NOT NULL DEFAULT 0,
    polls BIGINT NOT NULL DEFAULT 0,
    empty_polls BIGINT NOT NULL DEFAULT 0,
    started_at_ms BIGINT NOT NULL,
    heartbeat_at_ms BIGINT NOT NULL,
    status TEXT NOT NULL DEFAULT 'running',
    pending_signal TEXT
);
CREATE INDEX workers_heartbeat ON workers (heartbeat_at_ms);

CREATE TABLE duties (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
