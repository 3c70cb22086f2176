-- jobs.last_error, for the failures view and the `error:` search term: the first line
-- of the job's last recorded error, at most schema_constants' last_error_max_chars
-- characters, rewritten whenever the error history changes, so every writer of
-- `errors` (acks, lease expiry, admission's cancellations) keeps it without knowing
-- of it.
CREATE TRIGGER jobs_last_error AFTER UPDATE OF errors ON jobs
WHEN new.errors <> old.errors
BEGIN
    UPDATE jobs SET last_error = substr(
        CASE WHEN instr(coalesce(json_extract(new.errors, '$[#-1].error'), ''), char(10)) > 0
             THEN substr(json_extract(new.errors, '$[#-1].error'), 1,
                         instr(json_extract(new.errors, '$[#-1].error'), char(10)) - 1)
             ELSE coalesce(json_extract(new.errors, '$[#-1].error'), '') END, 1,
        (SELECT value FROM schema_constants WHERE name = 'last_error_max_chars'))
    WHERE rowid = new.rowid;
END;
