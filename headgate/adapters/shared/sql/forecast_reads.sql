-- The start forecast's bounded reads (forecast_reads.py).

-- name: count_ahead
-- Admission's order inside a partition (sqlite/admission.py's select_candidates),
-- counted up to a bound over the partial index jobs_admit.
SELECT count(*) FROM (SELECT 1 FROM jobs WHERE queue = ? AND partition_key = ?
    AND state = 'available' AND (priority > ? OR (priority = ? AND rowid < ?)) LIMIT ?) AS ahead

-- name: select_place
SELECT state, queue, partition_key, priority, rowid FROM jobs WHERE id = ?

-- name: select_oldest
-- The oldest available job over jobs_available_age.
SELECT id FROM jobs WHERE queue = ? AND state = 'available' ORDER BY enqueued_at_ms, rowid LIMIT 1

-- name: select_class_mix
SELECT rate_class, count(*) FROM (SELECT rate_class FROM jobs
    WHERE queue = ? AND state = 'available' LIMIT ?) AS sample GROUP BY rate_class
