-- headgate's SQLite schema: what `headgate migrate` leaves in an empty database,
-- made by the migrations (NNNN_*.sql) and the trigger files (triggers/).
-- Generated; do not edit. Regenerate with: .venv/bin/python scripts/schema.py --write
-- headgate/db/README.md says where each part is written.

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

CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    status INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX audit_log_action ON audit_log (action, id);
CREATE INDEX audit_log_at ON audit_log (at_ms);
CREATE INDEX audit_log_target ON audit_log (target, id);

CREATE TABLE concurrency_limits (
    name TEXT PRIMARY KEY,
    queue TEXT NOT NULL,
    max_concurrent INTEGER NOT NULL,
    on_saturated TEXT NOT NULL
);
CREATE INDEX concurrency_limits_queue ON concurrency_limits (queue);

CREATE TABLE duties (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at_ms INTEGER NOT NULL
);

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
    progress_updated_at_ms INTEGER,
    last_error TEXT NOT NULL DEFAULT '',
    counted INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_admit ON jobs (queue, partition_key, priority DESC) WHERE state = 'available';
CREATE INDEX jobs_available_age ON jobs (queue, enqueued_at_ms) WHERE state = 'available';
CREATE INDEX jobs_due ON jobs (scheduled_at_ms) WHERE state IN ('scheduled', 'retryable');
CREATE INDEX jobs_expiry ON jobs (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
CREATE INDEX jobs_finalized ON jobs (state, finalized_at_ms) WHERE finalized_at_ms IS NOT NULL;
CREATE INDEX jobs_kind_id ON jobs (kind, id);
CREATE INDEX jobs_last_error_id ON jobs (last_error, id) WHERE last_error <> '';
CREATE INDEX jobs_periodic ON jobs (periodic_schedule_id, periodic_tick_ms) WHERE periodic_schedule_id <> '';
CREATE INDEX jobs_quarantined_fingerprint ON jobs (fingerprint, id) WHERE state = 'quarantined';
CREATE INDEX jobs_queue_state_id ON jobs (queue, state, id);
CREATE INDEX jobs_rate_class_available_id ON jobs (rate_class, id) WHERE state = 'available' AND rate_class <> '';
CREATE INDEX jobs_running ON jobs (lease_expires_at_ms) WHERE state = 'running';

CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
    UPDATE partitions SET
        waiting = waiting - (old.state = 'available'),
        running = running - (old.state = 'running')
    WHERE old.state IN ('available', 'running')
        AND queue = old.queue AND partition_key = old.partition_key;
END;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs WHEN new.counted = 0 BEGIN
    INSERT INTO queue_counts (queue, state, n) VALUES (new.queue, new.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
    INSERT INTO queue_history (queue, bucket_ms, arrived)
        VALUES (new.queue, new.enqueued_at_ms - new.enqueued_at_ms % (
                    SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'), 1)
        ON CONFLICT (queue, bucket_ms) DO UPDATE SET arrived = arrived + 1;
END;

CREATE TRIGGER jobs_count_update AFTER UPDATE OF state ON jobs
WHEN old.state <> new.state BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
    INSERT INTO queue_counts (queue, state, n) VALUES (new.queue, new.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_last_error AFTER UPDATE OF errors ON jobs
WHEN new.errors <> old.errors
BEGIN
    UPDATE jobs SET last_error = substr(
        CASE WHEN instr(coalesce(json_extract(new.errors, '$[#-1].error'), ''), char(10)) > 0
             THEN substr(json_extract(new.errors, '$[#-1].error'), 1,
                         instr(json_extract(new.errors, '$[#-1].error'), char(10)) - 1)
             ELSE coalesce(json_extract(new.errors, '$[#-1].error'), '') END, 1,
        (SELECT value FROM schema_constants WHERE name = 'last_error_max_chars'))
    WHERE rowid = new.rowid;
END;

CREATE TRIGGER jobs_latency_run AFTER UPDATE OF state ON jobs
WHEN old.state = 'running' AND new.state <> 'running' AND new.finalized_at_ms IS NOT NULL
    AND old.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, kind, metric, le_ms, n, sum_ms)
    SELECT new.queue, new.finalized_at_ms - new.finalized_at_ms % (
               SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'),
           new.kind, 'run',
           (SELECT le_ms FROM latency_bounds WHERE upper_ms >= v ORDER BY upper_ms LIMIT 1),
           1, v
    FROM (SELECT max(0, new.finalized_at_ms - old.attempted_at_ms) AS v)
    WHERE true
    ON CONFLICT (queue, bucket_ms, kind, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

CREATE TRIGGER jobs_latency_run_deleted AFTER DELETE ON jobs
WHEN old.state = 'running' AND old.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, kind, metric, le_ms, n, sum_ms)
    SELECT old.queue,
           t - t % (SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'),
           old.kind, 'run',
           (SELECT le_ms FROM latency_bounds WHERE upper_ms >= v ORDER BY upper_ms LIMIT 1),
           1, v
    FROM (SELECT t, max(0, t - old.attempted_at_ms) AS v
          FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS t))
    WHERE true
    ON CONFLICT (queue, bucket_ms, kind, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

CREATE TRIGGER jobs_latency_wait AFTER UPDATE OF state ON jobs
WHEN old.state = 'available' AND new.state = 'running' AND new.attempted_at_ms IS NOT NULL
BEGIN
    INSERT INTO queue_latency (queue, bucket_ms, kind, metric, le_ms, n, sum_ms)
    SELECT new.queue, new.attempted_at_ms - new.attempted_at_ms % (
               SELECT value FROM schema_constants WHERE name = 'history_bucket_ms'),
           new.kind, 'wait',
           (SELECT le_ms FROM latency_bounds WHERE upper_ms >= v ORDER BY upper_ms LIMIT 1),
           1, v
    FROM (SELECT max(0, new.attempted_at_ms - max(old.enqueued_at_ms, old.scheduled_at_ms))
                 AS v)
    WHERE true
    ON CONFLICT (queue, bucket_ms, kind, metric, le_ms) DO UPDATE SET
        n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

CREATE TRIGGER jobs_partition_insert AFTER INSERT ON jobs
WHEN new.counted = 0 AND new.state IN ('available', 'running') BEGIN
    INSERT INTO partitions (queue, partition_key, waiting, running)
        VALUES (new.queue, new.partition_key, new.state = 'available', new.state = 'running')
        ON CONFLICT (queue, partition_key) DO UPDATE SET
            waiting = waiting + (new.state = 'available'),
            running = running + (new.state = 'running');
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

CREATE TABLE latency_bounds (
    upper_ms INTEGER PRIMARY KEY,
    le_ms INTEGER NOT NULL
);

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
CREATE INDEX operations_active ON operations (created_at_ms) WHERE status IN ('queued', 'running');

CREATE TABLE partitions (
    queue TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    waiting INTEGER NOT NULL DEFAULT 0,
    running INTEGER NOT NULL DEFAULT 0,
    deficit INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, partition_key)
) WITHOUT ROWID;
CREATE INDEX partitions_waiting ON partitions (queue, partition_key) WHERE waiting > 0;

CREATE TABLE quarantine (
    fingerprint TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    crash_count INTEGER NOT NULL,
    quarantined_at_ms INTEGER NOT NULL,
    reason TEXT NOT NULL
);

CREATE TABLE queue_counts (
    queue TEXT NOT NULL,
    state TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

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
CREATE INDEX queue_history_bucket ON queue_history (bucket_ms);

CREATE TABLE queue_latency (
    queue TEXT NOT NULL,
    bucket_ms INTEGER NOT NULL,
    kind TEXT NOT NULL DEFAULT '',
    metric TEXT NOT NULL,
    le_ms INTEGER NOT NULL,
    n INTEGER NOT NULL DEFAULT 0,
    sum_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, bucket_ms, kind, metric, le_ms)
) WITHOUT ROWID;
CREATE INDEX queue_latency_bucket ON queue_latency (bucket_ms);

CREATE TABLE queue_memory (
    queue TEXT PRIMARY KEY,
    memory_bytes INTEGER NOT NULL,
    sampled_jobs INTEGER NOT NULL,
    sampled_at_ms INTEGER NOT NULL
);

CREATE TABLE queues (
    name TEXT PRIMARY KEY,
    weight INTEGER NOT NULL DEFAULT 1,
    paused INTEGER NOT NULL DEFAULT 0,
    max_unfinished_jobs INTEGER,
    rr_cursor TEXT NOT NULL DEFAULT '',
    created_at_ms INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE rate_class_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    limit_per_window INTEGER NOT NULL,
    window_ms INTEGER NOT NULL,
    change TEXT NOT NULL,
    throttles INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX rate_class_history_at ON rate_class_history (at_ms);
CREATE INDEX rate_class_history_name ON rate_class_history (name, id);

CREATE TABLE rate_classes (
    name TEXT PRIMARY KEY,
    limit_per_window INTEGER NOT NULL,
    window_ms INTEGER NOT NULL,
    burst INTEGER NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    tokens REAL NOT NULL,
    refilled_at_ms INTEGER NOT NULL,
    adaptive_min INTEGER,
    adaptive_max INTEGER,
    adaptive_factor REAL,
    adaptive_step INTEGER,
    base_limit INTEGER,
    base_burst INTEGER,
    last_decrease_ms INTEGER,
    last_increase_ms INTEGER,
    throttles INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE schedule_events (
    event_id INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id TEXT NOT NULL,
    tick_ms INTEGER NOT NULL,
    job_id TEXT,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    recorded_at_ms INTEGER NOT NULL
);
CREATE INDEX schedule_events_newest ON schedule_events (schedule_id, event_id DESC);

CREATE TABLE schedule_runs (
    schedule_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    job_id TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (schedule_id, idempotency_key)
);
CREATE INDEX schedule_runs_age ON schedule_runs (created_at_ms);

CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    payload BLOB NOT NULL,
    queue TEXT NOT NULL,
    partition_key TEXT NOT NULL DEFAULT '',
    rate_class TEXT NOT NULL DEFAULT '',
    priority INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 25,
    retention_ms INTEGER NOT NULL DEFAULT 0,
    spec TEXT NOT NULL,
    next_run_ms INTEGER NOT NULL,
    last_enqueued_ms INTEGER,
    on_missed TEXT NOT NULL DEFAULT 'skip',
    backfill_limit INTEGER NOT NULL DEFAULT 0,
    paused INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_run_ms) WHERE paused = 0;

CREATE TABLE schema_constants (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL
);

CREATE TABLE schema_triggers (
    name TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL
);

CREATE TABLE uniques (
    key BLOB PRIMARY KEY,
    job_id TEXT NOT NULL,
    expires_at_ms INTEGER
);
CREATE INDEX uniques_expiry ON uniques (expires_at_ms) WHERE expires_at_ms IS NOT NULL;

CREATE TABLE upkeep (
    name TEXT PRIMARY KEY,
    cursor BLOB,
    pruned INTEGER NOT NULL DEFAULT 0,
    passes INTEGER NOT NULL DEFAULT 0,
    pass_at_ms INTEGER
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
    pending_signal TEXT,
    agent TEXT,
    kinds TEXT
);
CREATE INDEX workers_heartbeat ON workers (heartbeat_at_ms);
