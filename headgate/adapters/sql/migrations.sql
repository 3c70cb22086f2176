-- The generated schema text (migrations.py): PostgreSQL's constant functions, SQLite's
-- constant tables.

-- name: constant_function
-- One per value of SQL_CONSTANTS: {name} its key (a literal identifier), {value} its
-- int(). A single SELECT without FROM: the planner inlines it and folds it to its value.
CREATE OR REPLACE FUNCTION headgate_{name}() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT {value}::bigint $$;

-- name: latency_bound_function
-- {ladder}: a `WHEN v <= bound THEN bound` line per bound of LATENCY_BOUNDS_MS; {inf}:
-- the +Inf bucket's int().
CREATE OR REPLACE FUNCTION headgate_latency_bound(v bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
{ladder}
        ELSE {inf} END::bigint
$$;

-- name: sqlite_constant_tables
SELECT count(*) FROM sqlite_master WHERE type = 'table'
    AND name IN ('schema_constants', 'latency_bounds')

-- name: select_constants
SELECT name, value FROM schema_constants

-- name: select_bounds
SELECT upper_ms, le_ms FROM latency_bounds ORDER BY upper_ms

-- name: delete_constants
DELETE FROM schema_constants

-- name: insert_constant
INSERT INTO schema_constants (name, value) VALUES (?, ?)

-- name: delete_bounds
DELETE FROM latency_bounds

-- name: insert_bound
INSERT INTO latency_bounds (upper_ms, le_ms) VALUES (?, ?)
