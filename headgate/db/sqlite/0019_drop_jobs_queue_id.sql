-- (queue, id) served a job page by queue with no state. On PostgreSQL no state change is
-- a HOT update, so every claim and every ack entered each job in it again; on SQLite each
-- enqueue wrote its pages (~9 % of a single enqueue's CPU). A queue's page without a state
-- now pages each of the queue's occupied states over (queue, state, id) newest first and
-- merges them, as a state alone pages its queues: no sort, and no walk outside the queue.
DROP INDEX IF EXISTS jobs_queue_id;
