-- Which partitions admission finds through partitions_waiting: a flag, not the count.
-- An index whose predicate reads `waiting` makes every change of the count a non-HOT
-- update: a new index entry in both of the table's indexes for every statement that
-- enqueues, claims or acks. While a snapshot is held none of those entries can go, and
-- every lookup of the row walks all of them (thousands of buffers after two minutes).
-- The flag is set when a partition's count rises above 0 and stays set while jobs come
-- and go, so the counts' updates are HOT; settle_partitions (the retention duty) clears
-- it where the count is 0. Readers ask for `has_waiting AND waiting > 0`: the index
-- holds every waiting partition, and the count filters out the few that emptied since.
ALTER TABLE partitions ADD COLUMN has_waiting BOOLEAN NOT NULL DEFAULT false;
UPDATE partitions SET has_waiting = true WHERE waiting > 0;
DROP INDEX partitions_waiting;
CREATE INDEX partitions_waiting ON partitions (queue, partition_key) WHERE has_waiting;
