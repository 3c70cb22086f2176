-- Window unique keys (expires_at_ms set) are pruned by the retention duty once their
-- window has passed, oldest first, in bounded batches: this index finds them without
-- reading the lifecycle keys (expires_at_ms NULL, held while their job is live).
CREATE INDEX uniques_expiry ON uniques (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
