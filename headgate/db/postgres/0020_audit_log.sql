-- What operators did through the control API: the same table as
-- db/sqlite/0020_audit_log.sql. One row per accepted (2xx) mutating request other than
-- an enqueue, written right after the change. `actor` is the token's name (never the
-- token), `target` what was acted on (`job:<id>`, `rate_class:<name>`, `queue:<name>`,
-- `jobs` for a selection or a bulk selector, ...), `detail` a JSON object, `outcome` a
-- short word (`ok`, `partial` when some ids of a selection failed). The retention duty
-- deletes rows older than HG_AUDIT_RETENTION_MS by `audit_log_at`.
CREATE TABLE audit_log (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    status INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX audit_log_at ON audit_log (at_ms);
-- Newest first per target (a job's sheet, a rate class) and per action (the filters).
CREATE INDEX audit_log_target ON audit_log (target, id);
CREATE INDEX audit_log_action ON audit_log (action, id);
