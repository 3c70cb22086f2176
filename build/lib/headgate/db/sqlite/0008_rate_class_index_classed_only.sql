-- Most jobs have no rate class (''), yet every one of them was entered in the
-- available-by-rate-class index on enqueue and removed on claim: one index page more
-- per write for a row no query asks for. Only classed jobs are indexed now; the queries
-- that use it (a class's waiting jobs and their count) say `rate_class <> ''` too, so
-- both planners can prove the partial index applies.
DROP INDEX IF EXISTS jobs_rate_class_available_id;
CREATE INDEX jobs_rate_class_available_id ON jobs (rate_class, id)
    WHERE state = 'available' AND rate_class <> '';
