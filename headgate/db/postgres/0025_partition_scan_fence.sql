-- Where a partition's candidate scan starts (PostgreSQL only). Every claimed job leaves
-- an entry in jobs_admit pointing at a row version that is no longer available; vacuum
-- removes them, but not while any session holds a snapshot older than them, and a scan
-- from the start of (queue, partition_key) then walks every job claimed since, one heap
-- visit each: a claim cost that grows for as long as the snapshot is held. The fence
-- (scan_priority, scan_rowid) is a position in the index's (priority DESC, rowid) order
-- with no available job of the partition before it: the jobs triggers move it back when
-- a job that sorts before it becomes available (functions/counters.sql), admission moves
-- it forward past what it claimed (functions/admit.sql). NULL: scan from the start.
ALTER TABLE partitions ADD COLUMN scan_priority INTEGER;
ALTER TABLE partitions ADD COLUMN scan_rowid BIGINT;
