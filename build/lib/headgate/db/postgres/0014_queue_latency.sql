-- Per-queue job latency histograms in the history's minute buckets, kept by the store
-- itself (statement triggers on jobs, functions/latency.sql), so every server exports
-- the fleet's figures: `wait` is available -> running, `run` is running -> terminal.
-- le_ms is a bucket's upper bound, -1 for +Inf; n and sum_ms are that bucket's count
-- and total. The bounds are LATENCY_BOUNDS_MS in headgate/core/latency.py.
CREATE TABLE queue_latency (
    queue TEXT NOT NULL,
    bucket_ms BIGINT NOT NULL,
    metric TEXT NOT NULL,
    le_ms BIGINT NOT NULL,
    n BIGINT NOT NULL DEFAULT 0,
    sum_ms BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, bucket_ms, metric, le_ms)
);
CREATE INDEX queue_latency_bucket ON queue_latency (bucket_ms);
