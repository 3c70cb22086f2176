-- Ageing out the per-minute buckets (buckets.py). Rows are named by their values, not
-- rowid/ctid: the same statement on both engines (queue_latency is WITHOUT ROWID on
-- SQLite).

-- name: prune_queue_history
DELETE FROM queue_history WHERE (queue, bucket_ms) IN (
    SELECT queue, bucket_ms FROM queue_history WHERE bucket_ms < ? ORDER BY bucket_ms LIMIT ?
)

-- name: prune_queue_latency
DELETE FROM queue_latency WHERE (queue, bucket_ms, kind, metric, le_ms) IN (
    SELECT queue, bucket_ms, kind, metric, le_ms FROM queue_latency WHERE bucket_ms < ?
    ORDER BY bucket_ms LIMIT ?
)

-- name: prune_rate_class_history
-- An adaptive rate class's limit changes (migration 0024), by the same horizon.
DELETE FROM rate_class_history WHERE id IN (
    SELECT id FROM rate_class_history WHERE at_ms < ? ORDER BY at_ms LIMIT ?
)

-- name: count_queue_history
-- The oldest bucket is one probe of the bucket_ms index.
SELECT (SELECT count(*) FROM queue_history),
       (SELECT count(*) FROM queue_history WHERE bucket_ms < ?),
       (SELECT min(bucket_ms) FROM queue_history)

-- name: count_queue_latency
SELECT (SELECT count(*) FROM queue_latency),
       (SELECT count(*) FROM queue_latency WHERE bucket_ms < ?),
       (SELECT min(bucket_ms) FROM queue_latency)
