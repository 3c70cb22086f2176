-- SQLite connections (connection.py): each new connection's settings, and the ledger
-- of applied migrations. {value} is an int() of the store's configuration: a PRAGMA
-- takes no parameters.

-- name: busy_timeout
PRAGMA busy_timeout = {value}

-- name: page_size
-- Small pages: a commit writes every page it touched to the WAL, and a job's state
-- change touches a dozen index pages. Only takes effect on a new file (before the
-- first table), which is when it matters.
PRAGMA page_size = 1024

-- name: journal_mode
PRAGMA journal_mode = WAL

-- name: synchronous
PRAGMA synchronous = NORMAL

-- name: wal_autocheckpoint
-- The checkpointer thread keeps the WAL short; this (~40 MB) is its fallback.
PRAGMA wal_autocheckpoint = 40000

-- name: journal_size_limit
-- A writer that starts the WAL over cuts the file back to this (checkpoint.py: what a
-- long reader leaves behind).
PRAGMA journal_size_limit = {value}

-- name: cache_size
PRAGMA cache_size = -65536

-- name: foreign_keys
PRAGMA foreign_keys = OFF

-- name: data_version
-- Changes whenever another connection commits.
PRAGMA data_version

-- name: create_migration_ledger
CREATE TABLE IF NOT EXISTS schema_migrations
    (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_ms INTEGER NOT NULL)

-- name: migration_applied
SELECT 1 FROM schema_migrations WHERE version = ?

-- name: record_migration
INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?, ?, ?)

-- name: ledger_exists
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'

-- name: applied_versions
SELECT version FROM schema_migrations

-- name: create_trigger_ledger
-- Which text of each trigger file this database last applied (headgate/db/README.md),
-- as PostgreSQL's schema_functions records its function files.
CREATE TABLE IF NOT EXISTS schema_triggers (name TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL, applied_at_ms INTEGER NOT NULL)

-- name: record_trigger_file
INSERT INTO schema_triggers (name, sha256, applied_at_ms) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET
    sha256 = excluded.sha256, applied_at_ms = excluded.applied_at_ms

-- name: triggers_in_use
SELECT name, sql FROM sqlite_master WHERE type = 'trigger'

-- name: trigger_ledger_exists
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_triggers'

-- name: applied_trigger_files
SELECT name, sha256 FROM schema_triggers

-- name: drop_trigger
-- {name}: a trigger a shipped trigger file defines (connection.trigger_definitions: a
-- \w+ name after CREATE TRIGGER).
DROP TRIGGER IF EXISTS {name}
