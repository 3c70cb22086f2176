-- The failures view and the `error:` search term: each job's last recorded error, first
-- line only, at most 200 characters, kept by the trigger in functions/last_error.sql
-- whenever the error history changes. The index is in "C" order so `error:PREFIX` is a
-- contiguous range whatever the database's collation; partial, so jobs that never
-- failed cost nothing.
ALTER TABLE jobs ADD COLUMN last_error TEXT NOT NULL DEFAULT '';

UPDATE jobs SET last_error =
    left(split_part(coalesce((errors::json -> -1) ->> 'error', ''), E'\n', 1), 200)
WHERE errors <> '[]';

CREATE INDEX jobs_last_error_id ON jobs ((last_error COLLATE "C"), id) WHERE last_error <> '';
