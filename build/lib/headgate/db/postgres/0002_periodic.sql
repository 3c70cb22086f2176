-- headgate schema 2 for PostgreSQL: the same tables as db/sqlite/0002_periodic.sql
-- (periodic schedules, their enqueue-event audit, run-now idempotency records, and an
-- index for prune by finalization time).

CREATE TABLE schedules (
    id TEXT COLLATE "C" PRIMARY KEY,
    kind TEXT NOT NULL,
    payload BYTEA NOT NULL,
    queue TEXT NOT NULL,
    partition_key TEXT NOT NULL DEFAULT '',
    rate_class TEXT NOT NULL DEFAULT '',
    priority INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 25,
    retention_ms BIGINT NOT NULL DEFAULT 0,
    spec TEXT NOT NULL,
    next_run_ms BIGINT NOT NULL,
    last_enqueued_ms BIGINT,
    on_missed TEXT NOT NULL DEFAULT 'skip',
    backfill_limit INTEGER NOT NULL DEFAULT 0,
    paused INTEGER NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_run_ms) WHERE paused = 0;

-- Identity ids are never reused, so keyset cursors stay valid after pruning. No foreign
-- key: events outlive a deleted schedule.
CREATE TABLE schedule_events (
    event_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id TEXT NOT NULL,
    tick_ms BIGINT NOT NULL,
    job_id TEXT,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    recorded_at_ms BIGINT NOT NULL
);
CREATE INDEX schedule_events_newest ON schedule_events (schedule_id, event_id DESC);

CREATE TABLE schedule_runs (
    schedule_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    job_id TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (schedule_id, idempotency_key)
);
CREATE INDEX schedule_runs_age ON schedule_runs (created_at_ms);

CREATE INDEX jobs_finalized ON jobs (state, finalized_at_ms) WHERE finalized_at_ms IS NOT NULL;
