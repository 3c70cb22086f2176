-- The rate-classes page links each class's waiting jobs to the Jobs page (rate_class = ?
-- AND state = 'available', newest first): that page walked every available job for a
-- small class (~1 s on SQLite with 1M jobs). The same partial index with id appended
-- serves it newest first and still serves the waiting count; it holds the same rows.
DROP INDEX IF EXISTS jobs_rate_class_available;
CREATE INDEX jobs_rate_class_available_id ON jobs (rate_class, id) WHERE state = 'available';
