-- The queue-history bucket every writer adds to (rows.py).

-- name: bump_history
-- Counts add up; the rejection counts keep their largest (see rows.bump_history).
INSERT INTO queue_history (queue, bucket_ms, arrived, completed, failed,
    rejected_rate_class, rejected_concurrency_limit, rejected_quarantine)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (queue, bucket_ms) DO UPDATE SET
    arrived = queue_history.arrived + excluded.arrived,
    completed = queue_history.completed + excluded.completed,
    failed = queue_history.failed + excluded.failed,
    rejected_rate_class = CASE WHEN excluded.rejected_rate_class > queue_history.rejected_rate_class
        THEN excluded.rejected_rate_class ELSE queue_history.rejected_rate_class END,
    rejected_concurrency_limit =
        CASE WHEN excluded.rejected_concurrency_limit > queue_history.rejected_concurrency_limit
        THEN excluded.rejected_concurrency_limit ELSE queue_history.rejected_concurrency_limit END,
    rejected_quarantine = CASE WHEN excluded.rejected_quarantine > queue_history.rejected_quarantine
        THEN excluded.rejected_quarantine ELSE queue_history.rejected_quarantine END
