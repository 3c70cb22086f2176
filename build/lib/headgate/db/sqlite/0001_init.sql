-- headgate schema 1: jobs, maintained counters, admission policy, registry, duties.
-- Counters are kept by triggers so every writer (admit, ack, operator) stays honest.

CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    payload BLOB NOT NULL,
    fingerprint TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    partition_key TEXT NOT NULL,
    rate_class TEXT NOT NULL,
    weight INTEGER NOT NULL,
    state TEXT NOT NULL,
    scheduled_at_ms INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    retention_ms INTEGER NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    sticky_worker TEXT NOT NULL DEFAULT '',
    headers TEXT NOT NULL DEFAULT '{}',
    attempt INTEGER NOT NULL DEFAULT 0,
    crash_attempt INTEGER NOT NULL DEFAULT 0,
    fence INTEGER NOT NULL DEFAULT 0,
    lease_id TEXT,
    lease_expires_at_ms INTEGER,
    worker_id TEXT,
    enqueued_at_ms INTEGER NOT NULL,
    attempted_at_ms INTEGER,
    finalized_at_ms INTEGER,
    expires_at_ms INTEGER,
    errors TEXT NOT NULL DEFAULT '[]',
    periodic_schedule_id TEXT NOT NULL DEFAULT '',
    periodic_tick_ms INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    was_pending INTEGER NOT NULL DEFAULT 0,
    result BLOB,
    result_schema_version INTEGER,
    output BLOB,
    output_schema_version INTEGER,
    output_fence INTEGER,
    output_updated_at_ms INTEGER,
    progress_current INTEGER,
    progress_total INTEGER,
    progress_message TEXT,
    progress_fence INTEGER,
    progress_updated_at_ms INTEGER
);

-- Admission: candidates per partition in priority then arrival order.
CREATE INDEX jobs_admit ON jobs (queue, partition_key, priority DESC) WHERE state = 'available';
CREATE INDEX jobs_available_age ON jobs (queue, enqueued_at_ms) WHERE state = 'available';
CREATE INDEX jobs_due ON jobs (scheduled_at_ms) WHERE state IN ('scheduled', 'retryable');
CREATE INDEX jobs_running ON jobs (lease_expires_at_ms) WHERE state = 'running';
CREATE INDEX jobs_running_partition ON jobs (queue, partition_key, attempted_at_ms)
    WHERE state = 'running';
CREATE INDEX jobs_expiry ON jobs (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
-- Inspection: keyset pages newest first.
CREATE INDEX jobs_state_id ON jobs (state, id);
CREATE INDEX jobs_queue_state_id ON jobs (queue, state, id);
CREATE INDEX jobs_kind_id ON jobs (kind, id);
CREATE INDEX jobs_fingerprint ON jobs (fingerprint);
CREATE INDEX jobs_periodic ON jobs (periodic_schedule_id, periodic_tick_ms)
    WHERE periodic_schedule_id <> '';

CREATE TABLE queues (
    name TEXT PRIMARY KEY,
    weight INTEGER NOT NULL DEFAULT 1,
    paused INTEGER NOT NULL DEFAULT 0,
    max_unfinished_jobs INTEGER,
    rr_cursor TEXT NOT NULL DEFAULT '',
    created_at_ms INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE queue_counts (
    queue TEXT NOT NULL,
    state TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

-- Per-partition waiting/running counts and the fairness deficit carried between admits.
CREATE TABLE partitions (
    queue TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    waiting INTEGER NOT NULL DEFAULT 0,
    running INTEGER NOT NULL DEFAULT 0,
    deficit INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, partition_key)
) WITHOUT ROWID;
CREATE INDEX partitions_waiting ON partitions (queue, partition_key) WHERE waiting > 0;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO queue_counts (queue, state, n) VALUES (new.queue, new.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_partition_insert AFTER INSERT ON jobs
WHEN new.state IN ('available', 'running') BEGIN
    INSERT INTO partitions (queue, partition_key, waiting, running)
        VALUES (new.queue, new.partition_key, new.state = 'available', new.state = 'running')
        ON CONFLICT (queue, partition_key) DO UPDATE SET
            waiting = waiting + (new.state = 'available'),
            running = running + (new.state = 'running');
END;

CREATE TRIGGER jobs_count_update AFTER UPDATE OF state ON jobs
WHEN old.state <> new.state BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
    INSERT INTO queue_counts (queue, state, n) VALUES (new.queue, new.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_partition_update AFTER UPDATE OF state ON jobs
WHEN old.state <> new.state
    AND (old.state IN ('available', 'running') OR new.state IN ('available', 'running')) BEGIN
    INSERT INTO partitions (queue, partition_key, waiting, running)
        VALUES (new.queue, new.partition_key,
                (new.state = 'available') - (old.state = 'available'),
                (new.state = 'running') - (old.state = 'running'))
        ON CONFLICT (queue, partition_key) DO UPDATE SET
            waiting = waiting + (new.state = 'available') - (old.state = 'available'),
            running = running + (new.state = 'running') - (old.state = 'running');
END;

CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
    UPDATE partitions SET
        waiting = waiting - (old.state = 'available'),
        running = running - (old.state = 'running')
    WHERE old.state IN ('available', 'running')
        AND queue = old.queue AND partition_key = old.partition_key;
END;

-- Minute buckets; written by the adapters from what each transaction already knows.
CREATE TABLE queue_history (
    queue TEXT NOT NULL,
    bucket_ms INTEGER NOT NULL,
    arrived INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    depth INTEGER,
    rejected_rate_class INTEGER NOT NULL DEFAULT 0,
    rejected_concurrency_limit INTEGER NOT NULL DEFAULT 0,
    rejected_quarantine INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, bucket_ms)
) WITHOUT ROWID;

CREATE TABLE rate_classes (
    name TEXT PRIMARY KEY,
    limit_per_window INTEGER NOT NULL,
    window_ms INTEGER NOT NULL,
    burst INTEGER NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    tokens REAL NOT NULL,
    refilled_at_ms INTEGER NOT NULL
);

CREATE TABLE concurrency_limits (
    name TEXT PRIMARY KEY,
    queue TEXT NOT NULL,
    max_concurrent INTEGER NOT NULL,
    on_saturated TEXT NOT NULL
);
CREATE INDEX concurrency_limits_queue ON concurrency_limits (queue);

CREATE TABLE quarantine (
    fingerprint TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    crash_count INTEGER NOT NULL,
    quarantined_at_ms INTEGER NOT NULL,
    reason TEXT NOT NULL
);

-- Effective unique keys. expires_at_ms NULL: lifecycle (held while the job is live).
CREATE TABLE uniques (
    key BLOB PRIMARY KEY,
    job_id TEXT NOT NULL,
    expires_at_ms INTEGER
);

CREATE TABLE workers (
    worker_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    queues TEXT NOT NULL,
    concurrency INTEGER NOT NULL,
    inflight INTEGER NOT NULL DEFAULT 0,
    polls INTEGER NOT NULL DEFAULT 0,
    empty_polls INTEGER NOT NULL DEFAULT 0,
    started_at_ms INTEGER NOT NULL,
    heartbeat_at_ms INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'running',
    pending_signal TEXT
);
CREATE INDEX workers_heartbeat ON workers (heartbeat_at_ms);

CREATE TABLE duties (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at_ms INTEGER NOT NULL
);
