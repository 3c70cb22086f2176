-- The latency histograms by kind as well as by queue, so the console and the API can
-- answer a kind's wait and run time percentiles (Prometheus keeps reading them by
-- queue: it sums the kinds). Buckets written before this have the kind '' (unknown).
-- functions/latency.sql, applied after the numbered migrations in the same
-- transaction, writes the job's kind under the new key.
ALTER TABLE queue_latency ADD COLUMN kind TEXT NOT NULL DEFAULT '';
ALTER TABLE queue_latency DROP CONSTRAINT queue_latency_pkey;
ALTER TABLE queue_latency ADD PRIMARY KEY (queue, bucket_ms, kind, metric, le_ms);
