-- Adaptive rate classes (headgate/core/adaptive.py): a class whose limit the store
-- lowers when handlers report throttles and raises while its jobs succeed. The same
-- columns and table as db/sqlite/0024_adaptive_rate_classes.sql.
-- `adaptive_min` NULL: the class is not adaptive (the other adaptive_* are then NULL).
-- `limit_per_window` and `burst` stay what admission reads: for an adaptive class the
-- adapted values; `base_limit` and `base_burst` are what the operator set, from which
-- the burst is scaled. `last_decrease_ms`/`last_increase_ms` allow one change of each
-- kind per window, fleet-wide; `throttles` counts reports since the last decrease.
ALTER TABLE rate_classes ADD COLUMN adaptive_min BIGINT;
ALTER TABLE rate_classes ADD COLUMN adaptive_max BIGINT;
ALTER TABLE rate_classes ADD COLUMN adaptive_factor DOUBLE PRECISION;
ALTER TABLE rate_classes ADD COLUMN adaptive_step BIGINT;
ALTER TABLE rate_classes ADD COLUMN base_limit BIGINT;
ALTER TABLE rate_classes ADD COLUMN base_burst BIGINT;
ALTER TABLE rate_classes ADD COLUMN last_decrease_ms BIGINT;
ALTER TABLE rate_classes ADD COLUMN last_increase_ms BIGINT;
ALTER TABLE rate_classes ADD COLUMN throttles BIGINT NOT NULL DEFAULT 0;

-- Each change of an adaptive class's limit: `change` is `set` (an operator's PUT),
-- `decrease` (with the `throttles` that led to it) or `increase` (consecutive increases
-- within a minute share one row, moved forward). Kept after the class is deleted; the
-- retention duty deletes rows older than the history horizon by `rate_class_history_at`.
CREATE TABLE rate_class_history (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name TEXT NOT NULL,
    at_ms BIGINT NOT NULL,
    limit_per_window BIGINT NOT NULL,
    window_ms BIGINT NOT NULL,
    change TEXT NOT NULL,
    throttles BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX rate_class_history_name ON rate_class_history (name, id);
CREATE INDEX rate_class_history_at ON rate_class_history (at_ms);
