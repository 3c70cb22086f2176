-- headgate's PostgreSQL schema: what `headgate migrate` leaves in an empty database,
-- made by the migrations (NNNN_*.sql) and the function files (functions/).
-- Generated; do not edit. Regenerate with: .venv/bin/python scripts/schema.py --write
-- headgate/db/README.md says where each part is written.

CREATE TYPE headgate_admitted AS (
    lost_id text,
    id text,
    kind text,
    queue text,
    state text,
    schema_version integer,
    priority integer,
    partition_key text,
    rate_class text,
    weight bigint,
    fingerprint text,
    scheduled_at_ms bigint,
    max_attempts integer,
    retention_ms bigint,
    tags text,
    sticky_worker text,
    headers text,
    attempt integer,
    crash_attempt integer,
    fence bigint,
    lease_id text,
    lease_expires_at_ms bigint,
    worker_id text,
    enqueued_at_ms bigint,
    attempted_at_ms bigint,
    finalized_at_ms bigint,
    errors text,
    periodic_schedule_id text,
    periodic_tick_ms bigint,
    cancel_requested integer,
    was_pending integer,
    payload bytea
);

CREATE TYPE headgate_candidate AS (
    rowid bigint,
    id text,
    priority integer,
    fingerprint text,
    rate_class text,
    weight bigint,
    sticky_worker text
);

CREATE TYPE headgate_fence AS (
    queue text,
    partition_key text,
    priority integer,
    rowid bigint
);

CREATE TABLE api_idempotency (
    scope_key text NOT NULL,
    request_hash text NOT NULL,
    state text NOT NULL,
    status integer,
    headers text,
    body bytea,
    created_at_ms bigint NOT NULL,
    expires_at_ms bigint NOT NULL,
    CONSTRAINT api_idempotency_pkey PRIMARY KEY (scope_key)
);
CREATE INDEX api_idempotency_expiry ON api_idempotency USING btree (expires_at_ms);

CREATE TABLE audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    at_ms bigint NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    status integer NOT NULL,
    outcome text NOT NULL,
    detail text NOT NULL,
    CONSTRAINT audit_log_pkey PRIMARY KEY (id)
);
CREATE INDEX audit_log_action ON audit_log USING btree (action, id);
CREATE INDEX audit_log_at ON audit_log USING btree (at_ms);
CREATE INDEX audit_log_target ON audit_log USING btree (target, id);

CREATE TABLE concurrency_limits (
    name text NOT NULL,
    queue text NOT NULL,
    max_concurrent bigint NOT NULL,
    on_saturated text NOT NULL,
    CONSTRAINT concurrency_limits_pkey PRIMARY KEY (name)
);
CREATE INDEX concurrency_limits_queue ON concurrency_limits USING btree (queue);

CREATE TABLE counter_generation (
    only_row boolean DEFAULT true NOT NULL,
    gen bigint NOT NULL,
    CONSTRAINT counter_generation_pkey PRIMARY KEY (only_row),
    CONSTRAINT counter_generation_only_row_check CHECK (only_row)
);

CREATE TABLE duties (
    name text NOT NULL,
    holder text NOT NULL,
    expires_at_ms bigint NOT NULL,
    CONSTRAINT duties_pkey PRIMARY KEY (name)
);

CREATE TABLE jobs (
    rowid bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    id text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    schema_version integer NOT NULL,
    payload bytea NOT NULL,
    fingerprint text NOT NULL,
    queue text NOT NULL,
    priority integer NOT NULL,
    partition_key text NOT NULL,
    rate_class text NOT NULL,
    weight bigint NOT NULL,
    state text NOT NULL,
    scheduled_at_ms bigint NOT NULL,
    max_attempts integer NOT NULL,
    retention_ms bigint NOT NULL,
    tags text DEFAULT '[]'::text NOT NULL,
    sticky_worker text DEFAULT ''::text NOT NULL,
    headers text DEFAULT '{}'::text NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    crash_attempt integer DEFAULT 0 NOT NULL,
    fence bigint DEFAULT 0 NOT NULL,
    lease_id text,
    lease_expires_at_ms bigint,
    worker_id text,
    enqueued_at_ms bigint NOT NULL,
    attempted_at_ms bigint,
    finalized_at_ms bigint,
    expires_at_ms bigint,
    errors text DEFAULT '[]'::text NOT NULL,
    periodic_schedule_id text DEFAULT ''::text NOT NULL,
    periodic_tick_ms bigint,
    cancel_requested integer DEFAULT 0 NOT NULL,
    was_pending integer DEFAULT 0 NOT NULL,
    result bytea,
    result_schema_version integer,
    output bytea,
    output_schema_version integer,
    output_fence bigint,
    output_updated_at_ms bigint,
    progress_current bigint,
    progress_total bigint,
    progress_message text,
    progress_fence bigint,
    progress_updated_at_ms bigint,
    last_error text DEFAULT ''::text NOT NULL,
    CONSTRAINT jobs_pkey PRIMARY KEY (id)
);
CREATE INDEX jobs_admit ON jobs USING btree (queue, partition_key, priority DESC, rowid) WHERE state = 'available'::text;
CREATE INDEX jobs_available_age ON jobs USING btree (queue, enqueued_at_ms) WHERE state = 'available'::text AND enqueued_at_ms IS NOT NULL;
CREATE INDEX jobs_due ON jobs USING btree (scheduled_at_ms) WHERE state = ANY (ARRAY['scheduled'::text, 'retryable'::text]);
CREATE INDEX jobs_expiry ON jobs USING btree (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
CREATE INDEX jobs_finalized ON jobs USING btree (state, finalized_at_ms) WHERE finalized_at_ms IS NOT NULL;
CREATE INDEX jobs_kind_id ON jobs USING btree (kind, id);
CREATE INDEX jobs_last_error_id ON jobs USING btree (last_error COLLATE "C", id) WHERE last_error <> ''::text;
CREATE INDEX jobs_periodic ON jobs USING btree (periodic_schedule_id, periodic_tick_ms) WHERE periodic_schedule_id <> ''::text;
CREATE INDEX jobs_quarantined_fingerprint ON jobs USING btree (fingerprint, id) WHERE state = 'quarantined'::text;
CREATE INDEX jobs_queue_state_id ON jobs USING btree (queue, state, id);
CREATE INDEX jobs_rate_class_available_id ON jobs USING btree (rate_class, id) WHERE state = 'available'::text AND rate_class <> ''::text;
CREATE INDEX jobs_running ON jobs USING btree (lease_expires_at_ms) WHERE state = 'running'::text;
CREATE TRIGGER jobs_counts_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS del FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_delete();
CREATE TRIGGER jobs_counts_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS ins FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_insert();
CREATE TRIGGER jobs_counts_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_update();
CREATE TRIGGER jobs_deleted_notify AFTER DELETE ON jobs FOR EACH ROW WHEN ((old.state <> ALL (ARRAY['completed'::text, 'archived'::text, 'cancelled'::text, 'quarantined'::text, 'undecodable'::text])) AND old.headers ~~ '%"headgate-result"%'::text) EXECUTE FUNCTION headgate_finished_notify();
CREATE TRIGGER jobs_finished_notify AFTER UPDATE OF state ON jobs FOR EACH ROW WHEN ((new.state = ANY (ARRAY['completed'::text, 'archived'::text, 'cancelled'::text, 'quarantined'::text, 'undecodable'::text])) AND old.state IS DISTINCT FROM new.state AND new.headers ~~ '%"headgate-result"%'::text) EXECUTE FUNCTION headgate_finished_notify();
CREATE TRIGGER jobs_last_error BEFORE UPDATE OF errors ON jobs FOR EACH ROW WHEN (old.errors IS DISTINCT FROM new.errors) EXECUTE FUNCTION headgate_last_error();
CREATE TRIGGER jobs_latency_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS del FOR EACH STATEMENT EXECUTE FUNCTION headgate_latency_delete();
CREATE TRIGGER jobs_latency_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION headgate_latency_update();

CREATE TABLE operations (
    id text NOT NULL,
    action text NOT NULL,
    selector text NOT NULL,
    dry_run integer NOT NULL,
    status text NOT NULL,
    affected bigint DEFAULT 0 NOT NULL,
    total_estimated bigint,
    total_capped integer DEFAULT 0 NOT NULL,
    cursor text DEFAULT ''::text NOT NULL,
    error text,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    finished_at_ms bigint,
    CONSTRAINT operations_pkey PRIMARY KEY (id)
);
CREATE INDEX operations_active ON operations USING btree (created_at_ms) WHERE status = ANY (ARRAY['queued'::text, 'running'::text]);

CREATE TABLE partitions_gen (
    queue text NOT NULL,
    partition_key text NOT NULL,
    waiting bigint DEFAULT 0 NOT NULL,
    running bigint DEFAULT 0 NOT NULL,
    deficit bigint DEFAULT 0 NOT NULL,
    scan_priority integer,
    scan_rowid bigint,
    has_waiting boolean DEFAULT false NOT NULL,
    gen bigint NOT NULL,
    CONSTRAINT partitions_gen_pkey PRIMARY KEY (gen, queue, partition_key)
);
CREATE INDEX partitions_gen_waiting ON partitions_gen USING btree (gen, queue, partition_key) WHERE has_waiting;

CREATE TABLE quarantine (
    fingerprint text NOT NULL,
    kind text NOT NULL,
    crash_count integer NOT NULL,
    quarantined_at_ms bigint NOT NULL,
    reason text NOT NULL,
    CONSTRAINT quarantine_pkey PRIMARY KEY (fingerprint)
);

CREATE TABLE queue_counts_gen (
    queue text NOT NULL,
    state text NOT NULL,
    n bigint NOT NULL,
    gen bigint NOT NULL,
    CONSTRAINT queue_counts_gen_pkey PRIMARY KEY (gen, queue, state)
);

CREATE TABLE queue_history (
    queue text NOT NULL,
    bucket_ms bigint NOT NULL,
    arrived bigint DEFAULT 0 NOT NULL,
    completed bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    depth bigint,
    rejected_rate_class bigint DEFAULT 0 NOT NULL,
    rejected_concurrency_limit bigint DEFAULT 0 NOT NULL,
    rejected_quarantine bigint DEFAULT 0 NOT NULL,
    CONSTRAINT queue_history_pkey PRIMARY KEY (queue, bucket_ms)
);
CREATE INDEX queue_history_bucket ON queue_history USING btree (bucket_ms);

CREATE TABLE queue_latency (
    queue text NOT NULL,
    bucket_ms bigint NOT NULL,
    metric text NOT NULL,
    le_ms bigint NOT NULL,
    n bigint DEFAULT 0 NOT NULL,
    sum_ms bigint DEFAULT 0 NOT NULL,
    kind text DEFAULT ''::text NOT NULL,
    CONSTRAINT queue_latency_pkey PRIMARY KEY (queue, bucket_ms, kind, metric, le_ms)
);
CREATE INDEX queue_latency_bucket ON queue_latency USING btree (bucket_ms);

CREATE TABLE queue_memory (
    queue text NOT NULL,
    memory_bytes bigint NOT NULL,
    sampled_jobs integer NOT NULL,
    sampled_at_ms bigint NOT NULL,
    CONSTRAINT queue_memory_pkey PRIMARY KEY (queue)
);

CREATE TABLE queues (
    name text NOT NULL,
    weight integer DEFAULT 1 NOT NULL,
    paused integer DEFAULT 0 NOT NULL,
    max_unfinished_jobs bigint,
    rr_cursor text DEFAULT ''::text NOT NULL,
    created_at_ms bigint DEFAULT 0 NOT NULL,
    CONSTRAINT queues_pkey PRIMARY KEY (name)
);

CREATE TABLE rate_class_history (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    name text NOT NULL,
    at_ms bigint NOT NULL,
    limit_per_window bigint NOT NULL,
    window_ms bigint NOT NULL,
    change text NOT NULL,
    throttles bigint DEFAULT 0 NOT NULL,
    CONSTRAINT rate_class_history_pkey PRIMARY KEY (id)
);
CREATE INDEX rate_class_history_at ON rate_class_history USING btree (at_ms);
CREATE INDEX rate_class_history_name ON rate_class_history USING btree (name, id);

CREATE TABLE rate_classes (
    name text NOT NULL,
    limit_per_window bigint NOT NULL,
    window_ms bigint NOT NULL,
    burst bigint NOT NULL,
    paused integer DEFAULT 0 NOT NULL,
    tokens double precision NOT NULL,
    refilled_at_ms bigint NOT NULL,
    adaptive_min bigint,
    adaptive_max bigint,
    adaptive_factor double precision,
    adaptive_step bigint,
    base_limit bigint,
    base_burst bigint,
    last_decrease_ms bigint,
    last_increase_ms bigint,
    throttles bigint DEFAULT 0 NOT NULL,
    CONSTRAINT rate_classes_pkey PRIMARY KEY (name)
);

CREATE TABLE schedule_events (
    event_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    schedule_id text NOT NULL,
    tick_ms bigint NOT NULL,
    job_id text,
    outcome text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    recorded_at_ms bigint NOT NULL,
    CONSTRAINT schedule_events_pkey PRIMARY KEY (event_id)
);
CREATE INDEX schedule_events_newest ON schedule_events USING btree (schedule_id, event_id DESC);

CREATE TABLE schedule_runs (
    schedule_id text NOT NULL,
    idempotency_key text NOT NULL,
    job_id text NOT NULL,
    created_at_ms bigint NOT NULL,
    CONSTRAINT schedule_runs_pkey PRIMARY KEY (schedule_id, idempotency_key)
);
CREATE INDEX schedule_runs_age ON schedule_runs USING btree (created_at_ms);

CREATE TABLE schedules (
    id text COLLATE "C" NOT NULL,
    kind text NOT NULL,
    payload bytea NOT NULL,
    queue text NOT NULL,
    partition_key text DEFAULT ''::text NOT NULL,
    rate_class text DEFAULT ''::text NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 25 NOT NULL,
    retention_ms bigint DEFAULT 0 NOT NULL,
    spec text NOT NULL,
    next_run_ms bigint NOT NULL,
    last_enqueued_ms bigint,
    on_missed text DEFAULT 'skip'::text NOT NULL,
    backfill_limit integer DEFAULT 0 NOT NULL,
    paused integer DEFAULT 0 NOT NULL,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    CONSTRAINT schedules_pkey PRIMARY KEY (id)
);
CREATE INDEX schedules_due ON schedules USING btree (next_run_ms) WHERE paused = 0;

CREATE TABLE schema_functions (
    name text NOT NULL,
    sha256 text NOT NULL,
    applied_at_ms bigint NOT NULL,
    CONSTRAINT schema_functions_pkey PRIMARY KEY (name)
);

CREATE TABLE schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at_ms bigint NOT NULL,
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
);

CREATE TABLE uniques (
    key bytea NOT NULL,
    job_id text NOT NULL,
    expires_at_ms bigint,
    CONSTRAINT uniques_pkey PRIMARY KEY (key)
);
CREATE INDEX uniques_expiry ON uniques USING btree (expires_at_ms) WHERE expires_at_ms IS NOT NULL;

CREATE TABLE upkeep (
    name text NOT NULL,
    cursor bytea,
    pruned bigint DEFAULT 0 NOT NULL,
    passes bigint DEFAULT 0 NOT NULL,
    pass_at_ms bigint,
    CONSTRAINT upkeep_pkey PRIMARY KEY (name)
);

CREATE TABLE workers (
    worker_id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    queues text NOT NULL,
    concurrency integer NOT NULL,
    inflight integer DEFAULT 0 NOT NULL,
    polls bigint DEFAULT 0 NOT NULL,
    empty_polls bigint DEFAULT 0 NOT NULL,
    started_at_ms bigint NOT NULL,
    heartbeat_at_ms bigint NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    pending_signal text,
    agent text,
    kinds text,
    CONSTRAINT workers_pkey PRIMARY KEY (worker_id)
);
CREATE INDEX workers_heartbeat ON workers USING btree (heartbeat_at_ms);

CREATE VIEW partitions AS
 SELECT partitions_gen.queue,
    partitions_gen.partition_key,
    partitions_gen.waiting,
    partitions_gen.running,
    partitions_gen.deficit,
    partitions_gen.scan_priority,
    partitions_gen.scan_rowid,
    partitions_gen.has_waiting
   FROM partitions_gen
  WHERE partitions_gen.gen = (( SELECT counter_generation.gen
           FROM counter_generation
          WHERE counter_generation.only_row));

CREATE VIEW queue_counts AS
 SELECT queue_counts_gen.queue,
    queue_counts_gen.state,
    queue_counts_gen.n
   FROM queue_counts_gen
  WHERE queue_counts_gen.gen = (( SELECT counter_generation.gen
           FROM counter_generation
          WHERE counter_generation.only_row));
