-- jobs.last_error (migration 0012): the first line of the newest entry of `errors`, at
-- most headgate_last_error_max_chars() characters (generated from
-- headgate/core/schema_constants.py), set before the row is written whenever `errors`
-- changes, so every writer (Python acks, lease expiry, headgate_admit's cancellations)
-- keeps it.

CREATE OR REPLACE FUNCTION headgate_last_error() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.last_error := left(split_part(coalesce((NEW.errors::json -> -1) ->> 'error', ''),
                                      E'\n', 1), headgate_last_error_max_chars()::integer);
    RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER jobs_last_error BEFORE UPDATE OF errors ON jobs
    FOR EACH ROW WHEN (OLD.errors IS DISTINCT FROM NEW.errors)
    EXECUTE FUNCTION headgate_last_error();
