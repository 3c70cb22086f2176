-- Every new job was entered in every full index of `jobs`, and every state change moved
-- it in each index that holds the state: most of a commit's WAL pages. Two of those
-- indexes were there for inspection, which can do without them:
-- - (state, id): a job page by state alone now pages each queue of (queue, state, id)
--   newest first and merges them; the maintained counters say which queues have any
--   job in that state. (queue, id) stays: a queue and a filter no index serves walk it
--   newest first, and neither column ever changes, so it costs only the insert.
-- - (fingerprint): its one writer-side reader releases a quarantined fingerprint, so
--   only quarantined jobs are indexed. A fingerprint filter on other states walks
--   newest first, like a partition key.
DROP INDEX IF EXISTS jobs_state_id;
DROP INDEX IF EXISTS jobs_fingerprint;
CREATE INDEX jobs_quarantined_fingerprint ON jobs (fingerprint, id) WHERE state = 'quarantined';
