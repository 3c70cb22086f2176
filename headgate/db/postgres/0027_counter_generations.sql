-- The counter rows (queue_counts, partitions) keyed by a generation. Every enqueue,
-- claim and ack updates the same few rows; while a snapshot is held, none of their
-- versions can be removed, and each lookup of a row walks all versions written since the
-- snapshot began (thousands of buffers a call after minutes). A duty starts a new
-- generation every few seconds (headgate_roll_counters_v1: a copy of the current rows,
-- under a lock that every writer of counts shares), so a lookup of (generation, key)
-- walks only the versions of one generation. The views keep the tables' names and
-- columns: readers and the updates of admission read and write the current generation
-- through them. Every read of counter_generation names its key (`WHERE only_row`): a
-- scan without one is a sequential scan, which admission disables, and a disabled plan
-- costs enough to be JIT-compiled on every call.
CREATE TABLE counter_generation (
    only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
    gen BIGINT NOT NULL
);
INSERT INTO counter_generation (only_row, gen) VALUES (true, 1);

ALTER TABLE queue_counts RENAME TO queue_counts_gen;
ALTER TABLE queue_counts_gen ADD COLUMN gen BIGINT NOT NULL DEFAULT 1;
ALTER TABLE queue_counts_gen ALTER COLUMN gen DROP DEFAULT;
ALTER TABLE queue_counts_gen DROP CONSTRAINT queue_counts_pkey;
ALTER TABLE queue_counts_gen ADD CONSTRAINT queue_counts_gen_pkey
    PRIMARY KEY (gen, queue, state);
CREATE VIEW queue_counts AS
    SELECT queue, state, n FROM queue_counts_gen
    WHERE gen = (SELECT gen FROM counter_generation WHERE only_row);

ALTER TABLE partitions RENAME TO partitions_gen;
ALTER TABLE partitions_gen ADD COLUMN gen BIGINT NOT NULL DEFAULT 1;
ALTER TABLE partitions_gen ALTER COLUMN gen DROP DEFAULT;
ALTER TABLE partitions_gen DROP CONSTRAINT partitions_pkey;
ALTER TABLE partitions_gen ADD CONSTRAINT partitions_gen_pkey
    PRIMARY KEY (gen, queue, partition_key);
DROP INDEX partitions_waiting;
CREATE INDEX partitions_gen_waiting ON partitions_gen (gen, queue, partition_key)
    WHERE has_waiting;
CREATE VIEW partitions AS
    SELECT queue, partition_key, waiting, running, deficit, scan_priority, scan_rowid,
           has_waiting
    FROM partitions_gen WHERE gen = (SELECT gen FROM counter_generation WHERE only_row);
