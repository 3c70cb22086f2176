-- Reading the job latency histograms (latency.py).

-- name: select_since
SELECT queue, bucket_ms, metric, le_ms, n, sum_ms FROM queue_latency WHERE bucket_ms >= ?

-- name: totals_since
-- {where}: "", " AND queue = ?", " AND kind = ?" or both: one queue (a range of the key),
-- one kind (the bucket index).
SELECT queue, kind, metric, le_ms, sum(n), sum(sum_ms) FROM queue_latency
WHERE bucket_ms >= ?{where}
GROUP BY queue, kind, metric, le_ms
