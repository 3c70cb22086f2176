-- The per-queue state counters (queue_counts) and the partitions' waiting/running counts,
-- kept exact by statement-level triggers on jobs: one delta per statement from its
-- transition tables, however many rows it touched. Both are views of the current
-- generation of queue_counts_gen and partitions_gen (0027_counter_generations.sql): the
-- triggers write the generation headgate_counter_gen_v1 returns, which holds the
-- counters lock shared until the transaction ends, and headgate_roll_counters_v1 starts
-- the next one. A partition's has_waiting flag
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

-- The current counter generation, with the counters lock held shared (re-entrant: a
-- transaction that locked a queue holds it already) so that it stays current until this
-- transaction's counts are committed. Read after the lock, in a statement of its own:
-- under READ COMMITTED its snapshot then sees any roll that committed meanwhile. A
-- REPEATABLE READ or SERIALIZABLE transaction keeps its first snapshot; when a roll
-- replaced the row since (the version it sees has an updater), its counts would go to a
-- generation already copied and deleted, so it fails as a serialization failure, which
-- such a transaction's caller retries.
CREATE OR REPLACE FUNCTION headgate_counter_gen_v1() RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_gen BIGINT;
    v_replaced BOOLEAN;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(headgate_counters_lock_key());
    SELECT gen, NOT (xmax = '0'::xid) INTO v_gen, v_replaced FROM counter_generation
    WHERE only_row;
    IF v_replaced AND current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'the counter generation changed after this transaction''s snapshot'
            USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN v_gen;
END $$;

CREATE OR REPLACE FUNCTION headgate_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_gen BIGINT := headgate_counter_gen_v1();
BEGIN
    INSERT INTO queue_counts_gen AS c (gen, queue, state, n)
    SELECT v_gen, queue, state, count(*) FROM ins GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (gen, queue, state) DO UPDATE SET n = c.n + excluded.n;
    -- The scan fence in the same write: a new job sorts after the fence (rowids only
    -- grow) unless its priority is higher, which moves the fence back to it. A new
    -- partition row has none (scan from the start: jobs may predate the row).
    INSERT INTO partitions_gen AS p (gen, queue, partition_key, waiting, running, has_waiting)
    SELECT v_gen, queue, partition_key,
           count(*) FILTER (WHERE state = 'available'), count(*) FILTER (WHERE state = 'running'),
           count(*) FILTER (WHERE state = 'available') > 0
    FROM ins WHERE state IN ('available', 'running')
    GROUP BY queue, partition_key ORDER BY queue, partition_key
    ON CONFLICT (gen, queue, partition_key) DO UPDATE SET
        waiting = p.waiting + excluded.waiting,
        running = p.running + excluded.running,
        has_waiting = p.has_waiting OR excluded.has_waiting,
        (scan_priority, scan_rowid) = (
            SELECT coalesce(f.priority, p.scan_priority), coalesce(f.rowid, p.scan_rowid)
            FROM (SELECT NULL) AS one LEFT JOIN (
                SELECT i.priority, i.rowid FROM ins i
                WHERE i.queue = excluded.queue AND i.partition_key = excluded.partition_key
                  AND i.state = 'available' AND i.priority > p.scan_priority
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
DECLARE
    v_gen BIGINT := headgate_counter_gen_v1();
BEGIN
    WITH changed AS (
        SELECT o.queue, o.partition_key, o.state AS old_state, n.state AS new_state
        FROM old_rows o JOIN new_rows n ON n.id = o.id WHERE o.state <> n.state
    ), deltas AS (
        SELECT queue, old_state AS state, -1 AS n FROM changed
        UNION ALL SELECT queue, new_state, 1 FROM changed
    )
    INSERT INTO queue_counts_gen AS c (gen, queue, state, n)
    SELECT v_gen, queue, state, sum(n) FROM deltas GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (gen, queue, state) DO UPDATE SET n = c.n + excluded.n;
    WITH changed AS (
        SELECT o.queue, o.partition_key, o.state AS old_state, n.state AS new_state
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        WHERE o.state <> n.state
          AND (o.state IN ('available', 'running') OR n.state IN ('available', 'running'))
    )
    INSERT INTO partitions_gen AS p (gen, queue, partition_key, waiting, running, has_waiting)
    SELECT v_gen, queue, partition_key,
           sum((new_state = 'available')::int - (old_state = 'available')::int),
           sum((new_state = 'running')::int - (old_state = 'running')::int),
           bool_or(new_state = 'available')
    FROM changed GROUP BY queue, partition_key ORDER BY queue, partition_key
    ON CONFLICT (gen, queue, partition_key) DO UPDATE SET
        waiting = p.waiting + excluded.waiting,
        running = p.running + excluded.running,
        has_waiting = p.has_waiting OR excluded.has_waiting;
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
DECLARE
    v_gen BIGINT := headgate_counter_gen_v1();
BEGIN
    INSERT INTO queue_counts_gen AS c (gen, queue, state, n)
    SELECT v_gen, queue, state, -count(*) FROM del GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (gen, queue, state) DO UPDATE SET n = c.n + excluded.n;
    INSERT INTO partitions_gen AS p (gen, queue, partition_key, waiting, running)
    SELECT v_gen, queue, partition_key,
           -count(*) FILTER (WHERE state = 'available'), -count(*) FILTER (WHERE state = 'running')
    FROM del WHERE state IN ('available', 'running')
    GROUP BY queue, partition_key ORDER BY queue, partition_key
    ON CONFLICT (gen, queue, partition_key) DO UPDATE SET
        waiting = p.waiting + excluded.waiting,
        running = p.running + excluded.running;
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

-- The next counter generation: the current rows copied under it and deleted (each roll
-- deletes the one generation it ends, so no statement walks older ones) and the
-- generation advanced. A partition with no job waiting or running and no credit is
-- left behind: every later change of its counts is an upsert that adds the row again
-- (without a scan fence: a scan from the start), so a queue of many tenants copies
-- only its busy ones. The copy is in one transaction that holds the counters lock
-- exclusively, so no transaction that wrote counts under the current one is still open
-- and none writes until it commits. Readers need no lock: a statement's snapshot sees
-- one generation with its rows, before the roll or after it. A transaction that keeps
-- the shared lock longer than p_wait_ms (a producer's own long transaction) makes this
-- give up and return 0, holding writers up no longer than that wait; otherwise the new
-- generation.
CREATE OR REPLACE FUNCTION headgate_roll_counters_v1(p_wait_ms INTEGER) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_gen BIGINT;
    v_timeout TEXT := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', p_wait_ms || 'ms', true);
    BEGIN
        PERFORM pg_advisory_xact_lock(headgate_counters_lock_key());
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', v_timeout, true);
        RETURN 0;
    END;
    PERFORM set_config('lock_timeout', v_timeout, true);
    SELECT gen INTO v_gen FROM counter_generation WHERE only_row;
    INSERT INTO queue_counts_gen (gen, queue, state, n)
    SELECT v_gen + 1, queue, state, n FROM queue_counts_gen WHERE gen = v_gen;
    INSERT INTO partitions_gen (gen, queue, partition_key, waiting, running, deficit,
                                scan_priority, scan_rowid, has_waiting)
    SELECT v_gen + 1, queue, partition_key, waiting, running, deficit, scan_priority,
           scan_rowid, has_waiting
    FROM partitions_gen
    WHERE gen = v_gen AND (waiting <> 0 OR running <> 0 OR deficit <> 0 OR has_waiting);
    DELETE FROM queue_counts_gen WHERE gen = v_gen;
    DELETE FROM partitions_gen WHERE gen = v_gen;
    UPDATE counter_generation SET gen = v_gen + 1 WHERE only_row;
    RETURN v_gen + 1;
END $$;

CREATE OR REPLACE TRIGGER jobs_counts_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS ins FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_insert();
CREATE OR REPLACE TRIGGER jobs_counts_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_update();
CREATE OR REPLACE TRIGGER jobs_counts_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS del FOR EACH STATEMENT EXECUTE FUNCTION headgate_counts_delete();
