-- PostgreSQL connections (connection.py): the database clock, and the ledgers of applied
-- migrations and function files. These run on psycopg's own connection (`%s`
-- placeholders), not through PgConnection.

-- name: clock
-- The store clock (db/postgres/functions/clock.sql): the database's, so every process
-- agrees.
SELECT headgate_now_ms()

-- name: migration_lock
-- Processes starting together migrate one at a time (connection.MIGRATION_LOCK).
SELECT pg_advisory_xact_lock(%s)

-- name: create_migration_ledger
CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY,
    name TEXT NOT NULL, applied_at_ms BIGINT NOT NULL)

-- name: applied_versions
SELECT version FROM schema_migrations

-- name: record_migration
-- applied_at_ms is the migrating process's clock, as on SQLite: the ledgers are written
-- before the store clock's function exists.
INSERT INTO schema_migrations (version, name, applied_at_ms)
VALUES (%s, %s, %s)

-- name: create_function_ledger
CREATE TABLE IF NOT EXISTS schema_functions (name TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL, applied_at_ms BIGINT NOT NULL)

-- name: applied_function_files
SELECT name, sha256 FROM schema_functions

-- name: record_function_file
INSERT INTO schema_functions (name, sha256, applied_at_ms)
VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE
SET sha256 = excluded.sha256, applied_at_ms = excluded.applied_at_ms

-- name: function_ledger_exists
SELECT to_regclass('schema_functions')

-- name: migration_ledger_exists
SELECT to_regclass('schema_migrations')
