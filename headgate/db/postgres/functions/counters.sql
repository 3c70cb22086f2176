-- The per-queue state counters (queue_counts) and the partitions' waiting/running counts,
-- kept exact by statement-level triggers on jobs: one delta per statement from its
-- transition tables, however many rows it touched. A partition's has_waiting flag
-- (0026_partitions_waiting_flag.sql) is set by any statement that makes one of its jobs
-- available and left as it is otherwise (an unchanged flag keeps the update HOT);
-- headgate_settle_partitions_v1 clears it. The insert trigger also counts the
-- arrivals (queue_history.arrived, in the bucket of the jobs' enqueued_at_ms): every
-- insert into jobs is an enqueue, whether by the plain statement, a COPY batch or
-- headgate_enqueue_v3, so none of them writes arrivals itself.

-- A partition's scan fence (db/postgres/0025_partition_scan_fence.sql) moved back to
-- the earliest of the given available rows that sorts before it (for updates: an insert
-- moves it in its own partitions upsert, below), in the admission order
-- (priority DESC, rowid): afterwards no available job of the partition precedes it.
-- Rows that sort after the fence (every fresh enqueue of a single-priority queue) write
-- nothing.
DO $$ BEGIN
CREATE TYPE headgate_fence AS (queue TEXT, partition_key TEXT, priority INTEGER, rowid BIGINT);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

CREATE OR REPLACE FUNCTION headgate_lower_fences_v1(p_rows headgate_fence[]) RETURNS void
LANGUAGE sql AS $$
    UPDATE partitions p SET scan_priority = f.priority, scan_rowid = f.rowid
    FROM (SELECT DISTINCT ON (r.queue, r.partition_key) r.queue, r.partition_key,
                 r.priority, r.rowid
          FROM unnest(p_rows) AS r
          ORDER BY r.queue, r.partition_key, r.priority DESC, r.rowid) AS f
    WHERE p.queue = f.queue AND p.partition_key = f.partition_key
      AND p.scan_rowid IS NOT NULL
      AND (f.priority > p.scan_priority
           OR (f.priority = p.scan_priority AND f.rowid < p.scan_rowid))
$$;

CREATE OR REPLACE FUNCTION headgate_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_counts (queue, state, n)
    SELECT queue, state, count(*) FROM ins GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state) DO UPDATE SET n = queue_counts.n + excluded.n;
    -- The scan fence in the same write: a new job sorts after the fence (rowids only
    -- grow) unless its priority is higher, which moves the fence back to it. A new
    -- partition row has none (scan from the start: jobs may predate the row).
    INSERT INTO partitions (queue, partition_key, waiting, running, has_waiting)
    SELECT queue, partition_key,
           count(*) FILTER (WHERE state = 'available'), count(*) FILTER (WHERE state = 'running'),
           count(*) FILTER (WHERE state = 'available') > 0
    FROM ins WHERE state IN ('available', 'running')
    GROUP BY queue, partition_key ORDER BY queue, partition_key
    ON CONFLICT (queue, partition_key) DO UPDATE SET
        waiting = partitions.waiting + excluded.waiting,
        running = partitions.running + excluded.running,
        has_waiting = partitions.has_waiting OR excluded.has_waiting,
        (scan_priority, scan_rowid) = (
            SELECT coalesce(f.priority, partitions.scan_priority),
                   coalesce(f.rowid, partitions.scan_rowid)
            FROM (SELECT NULL) AS one LEFT JOIN (
                SELECT i.priority, i.rowid FROM ins i
                WHERE i.queue = excluded.queue AND i.partition_key = excluded.partition_key
                  AND i.state = 'available' AND i.priority > partitions.scan_priority
                ORDER BY i.priority DESC, i.rowid LIMIT 1) AS f ON true);
    -- after the counters, as admission writes its history after its claims: one order
    INSERT INTO queue_history (queue, bucket_ms, arrived)
    SELECT queue, enqueued_at_ms - enqueued_at_ms % headgate_history_bucket_ms(), count(*)
    FROM ins GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (queue, bucket_ms) DO UPDATE SET
        arrived = queue_history.arrived + excluded.arrived;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION headgate_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH changed AS (
        SELECT o.queue, o.partition_key, o.state AS old_state, n.state AS new_state
        FROM old_rows o JOIN new_rows n ON n.id = o.id WHERE o.state <> n.state
    ), deltas AS (
        SELECT queue, old_state AS state, -1 AS n FROM changed
        UNION ALL SELECT queue, new_state, 1 FROM changed
    )
    INSERT INTO queue_counts (queue, state, n)
    SELECT queue, state, sum(n) FROM deltas GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state) DO UPDATE SET n = queue_counts.n + excluded.n;
    WITH changed AS (
        SELECT o.queue, o.partition_key, o.state AS old_state, n.state AS new_state
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        WHERE o.state <> n.state
          AND (o.state IN ('available', 'running') OR n.state IN ('available', 'running'))
    )
    INSERT INTO partitions (queue, partition_key, waiting, running, has_waiting)
    SELECT queue, partition_key,
           sum((new_state = 'available')::int - (old_state = 'available')::int),
           sum((new_state = 'running')::int - (old_state = 'running')::int),
           bool_or(new_state = 'available')
    FROM changed GROUP BY queue, partition_key ORDER BY queue, partition_key
    ON CONFLICT (queue, partition_key) DO UPDATE SET
        waiting = partitions.waiting + excluded.waiting,
        running = partitions.running + excluded.running,
        has_waiting = partitions.has_waiting OR excluded.has_waiting;
    -- Any row that is available after the statement, whether it became so (a retry, a
    -- promotion, a reclaim) or was changed in place (a new priority). A claim or an ack
    -- leaves none, and pays one look.
    IF EXISTS (SELECT 1 FROM new_rows WHERE state = 'available') THEN
        PERFORM headgate_lower_fences_v1(ARRAY(SELECT ROW(queue, partition_key, priority,
                                                          rowid)::headgate_fence
                                               FROM new_rows WHERE state = 'available'));
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION headgate_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_counts (queue, state, n)
    SELECT queue, state, -count(*) FROM del GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state) DO UPDATE SET n = queue_counts.n + excluded.n;
    INSERT INTO partitions (queue, partition_key, waiting, running)
    SELECT queue, partition_key,
           -count(*) FILTER (WHERE state = 'available'), -count(*) FILTER (WHERE state = 'running')
    FROM del WHERE state IN ('available', 'running')
    GROUP BY queue, partition_key ORDER BY queue, partition_key
    ON CONFLICT (queue, partition_key) DO UPDATE SET
        waiting = partitions.waiting + excluded.waiting,
        running = partitions.running + excluded.running;
    RETURN NULL;
END $$;

-- Flags of partitions with no waiting job cleared, up to p_limit; how many. Each row is
-- re-checked under its lock (READ COMMITTED), so a count raised meanwhile keeps its flag.
CREATE OR REPLACE FUNCTION headgate_settle_partitions_v1(p_limit INTEGER) RETURNS INTEGER
LANGUAGE sql AS $$
    WITH settled AS (
        UPDATE partitions SET has_waiting = false
        WHERE (queue, partition_key) IN (SELECT queue, partition_key FROM partitions
                                         WHERE has_waiting AND waiting = 0 LIMIT p_limit)
          AND has_waiting AND waiting = 0
        RETURNING 1
    )
    SELECT count(*)::integer FROM settled
$$;

CREATE OR REPLACE TRIGGER jobs_counts_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS ins FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_insert();
CREATE OR REPLACE TRIGGER jobs_counts_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_update();
CREATE OR REPLACE TRIGGER jobs_counts_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS del FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_delete();
