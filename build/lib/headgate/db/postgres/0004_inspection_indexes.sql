-- Job pages filtered by queue alone (newest first) scanned; the rate-class index
-- already exists here (0001).
CREATE INDEX jobs_queue_id ON jobs (queue, id);
