-- Inspection paths that scanned: job pages filtered by queue alone (newest first) and
-- the waiting count per rate class on the rate-classes page.
CREATE INDEX jobs_queue_id ON jobs (queue, id);
CREATE INDEX jobs_rate_class_available ON jobs (rate_class) WHERE state = 'available';
