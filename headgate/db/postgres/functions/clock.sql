-- The store clock: milliseconds since the epoch, read from the database so that every
-- process agrees on one clock. Truncated to the millisecond (floor), as SQLite's store
-- truncates its clock (adapters/sqlite/connection.py): a cast of the numeric alone rounds,
-- up to half a millisecond into the future.
--
-- clock_timestamp(), not now(): a transaction that waited for a lock dates what it writes
-- from after the wait. One SELECT without FROM, VOLATILE like its body, so the planner
-- inlines it into the calling statement: naming the clock costs what its expression did.
-- Its callers are PL/pgSQL functions and statements, resolved when they run, so this file
-- may sort after theirs.
CREATE OR REPLACE FUNCTION headgate_now_ms() RETURNS BIGINT
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;
