-- headgate schema 2: periodic schedules, their enqueue-event audit, run-now
-- idempotency records, and an index for prune by finalization time.

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
-- The scheduler tick reads only due, unpaused rows.
CREATE INDEX schedules_due ON schedules (next_run_ms) WHERE paused = 0;

-- AUTOINCREMENT: ids are never reused after pruning, so keyset cursors stay valid.
-- No foreign key: events outlive a deleted schedule.
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

-- "Run now" per Idempotency-Key: which job a key produced, so a retried request is a
-- replay even after that job was completed and deleted.
CREATE TABLE schedule_runs (
    schedule_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    job_id TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (schedule_id, idempotency_key)
);
CREATE INDEX schedule_runs_age ON schedule_runs (created_at_ms);

-- prune(older_than) finds terminal jobs by finalization time without a table scan.
CREATE INDEX jobs_finalized ON jobs (state, finalized_at_ms) WHERE finalized_at_ms IS NOT NULL;
