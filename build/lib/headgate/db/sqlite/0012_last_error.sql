-- The failures view and the `error:` search term: each job's last recorded error, first
-- line only ("TimeoutError: webhook … did not answer"), at most 200 characters, kept
-- by a trigger whenever the error history changes, so every writer of `errors` (acks,
-- lease expiry, admission's cancellations) keeps it without knowing of it. The partial
-- index serves `error:PREFIX` as a range (binary order keeps a prefix together) and
-- costs nothing for jobs that never failed.
ALTER TABLE jobs ADD COLUMN last_error TEXT NOT NULL DEFAULT '';

UPDATE jobs SET last_error = substr(
    CASE WHEN instr(coalesce(json_extract(errors, '$[#-1].error'), ''), char(10)) > 0
         THEN substr(json_extract(errors, '$[#-1].error'), 1,
                     instr(json_extract(errors, '$[#-1].error'), char(10)) - 1)
         ELSE coalesce(json_extract(errors, '$[#-1].error'), '') END, 1, 200)
WHERE errors <> '[]';

CREATE INDEX jobs_last_error_id ON jobs (last_error, id) WHERE last_error <> '';

CREATE TRIGGER jobs_last_error AFTER UPDATE OF errors ON jobs
WHEN new.errors <> old.errors
BEGIN
    UPDATE jobs SET last_error = substr(
        CASE WHEN instr(coalesce(json_extract(new.errors, '$[#-1].error'), ''), char(10)) > 0
             THEN substr(json_extract(new.errors, '$[#-1].error'), 1,
                         instr(json_extract(new.errors, '$[#-1].error'), char(10)) - 1)
             ELSE coalesce(json_extract(new.errors, '$[#-1].error'), '') END, 1, 200)
    WHERE rowid = new.rowid;
END;
