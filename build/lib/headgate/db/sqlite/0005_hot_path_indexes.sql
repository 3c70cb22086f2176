-- Every claim and every completion writes each index on `state`; this one served only
-- the cancel_running ceiling's "oldest running job of a partition" (rare), which
-- jobs_queue_state_id answers as well: a queue's running jobs are at most the fleet's
-- concurrency.
DROP INDEX IF EXISTS jobs_running_partition;
