-- The uniques table's upkeep (uniques.py): expired window keys, and lifecycle keys
-- whose job is gone.

-- name: prune
-- The outer `expires_at_ms <= ?` is checked again on the row as it is deleted: on
-- PostgreSQL an enqueue may have re-claimed the key (a new window) since the inner
-- select read it, and that fresh row must survive.
DELETE FROM uniques WHERE key IN (
    SELECT key FROM uniques WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?
    ORDER BY expires_at_ms LIMIT ?
) AND expires_at_ms <= ?

-- name: counts
SELECT (SELECT count(*) FROM uniques),
       (SELECT count(*) FROM uniques WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?)

-- name: select_state
SELECT cursor, pruned, passes, pass_at_ms FROM upkeep WHERE name = ?

-- name: scan_start
-- One batch of keys in key order; the third column marks an orphan (PK lookups only).
SELECT key, job_id, CASE WHEN expires_at_ms IS NULL
    AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = uniques.job_id) THEN 1 ELSE 0 END
FROM uniques ORDER BY key LIMIT ?

-- name: scan_after
SELECT key, job_id, CASE WHEN expires_at_ms IS NULL
    AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = uniques.job_id) THEN 1 ELSE 0 END
FROM uniques WHERE key > ? ORDER BY key LIMIT ?

-- name: delete_orphan
-- Re-checked as the row goes: on PostgreSQL an enqueue may have claimed the key for a
-- new job since the scan (job_id differs then, so the row stays).
DELETE FROM uniques WHERE key = ? AND job_id = ? AND expires_at_ms IS NULL
    AND NOT EXISTS (SELECT 1 FROM jobs WHERE id = ?)

-- name: restore
-- PostgreSQL: a DELETE that waited for an enqueue re-reading the same job id (an id
-- enqueued again after its job was deleted) re-checks the row, not the subquery, so it
-- can take the fresh claim. The job is visible to this next statement: put it back.
INSERT INTO uniques (key, job_id, expires_at_ms)
SELECT ?, ?, NULL WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ?)
ON CONFLICT (key) DO NOTHING

-- name: save_state
UPDATE upkeep SET cursor = ?, pruned = pruned + ?, passes = passes + ?,
    pass_at_ms = CASE WHEN ? = 1 THEN ? ELSE pass_at_ms END
WHERE name = ?
