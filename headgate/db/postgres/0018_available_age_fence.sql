-- The candidate scans (`queue = ? AND partition_key = ? AND state = 'available' ORDER BY
-- priority DESC, rowid`) belong to jobs_admit. Until `jobs` is first analyzed, the
-- planner takes every partial index of a table created empty to hold no rows, and then
-- preferred this smaller one plus a sort: every claim read all of the queue's available
-- jobs, and a worker's generic plan, made in that window, kept doing so until
-- autovacuum's first ANALYZE (up to a minute of claims at O(backlog) after a fresh
-- database takes a burst). With `enqueued_at_ms IS NOT NULL` in its predicate (always
-- true: the column is NOT NULL), only a query that says so can use it. Its readers: the
-- oldest available job's age, a min() that the planner rewrites with that test, and the
-- quiet group's oldest (queue_admin.extras), which states it.
DROP INDEX IF EXISTS jobs_available_age;
CREATE INDEX jobs_available_age ON jobs (queue, enqueued_at_ms)
    WHERE state = 'available' AND enqueued_at_ms IS NOT NULL;
