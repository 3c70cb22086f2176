-- Results waiters (headgate.tasks JobRef.result) hear that a job finished: a NOTIFY on
-- channel headgate_finished, payload the job id, when a job that carries the
-- "headgate-result" header (every job the task layer enqueues) reaches a terminal
-- state or is deleted before reaching one (success with retention 0, revoke, operator).
-- Row triggers with a WHEN clause: for every other row the condition is evaluated
-- without entering PL/pgSQL, so low-level jobs pay nothing more than the test.
-- The NOTIFY is transactional: a waiter hears it when the change is visible.

CREATE OR REPLACE FUNCTION headgate_finished_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('headgate_finished', OLD.id);
    ELSE
        PERFORM pg_notify('headgate_finished', NEW.id);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER jobs_finished_notify AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.state IN ('completed', 'archived', 'cancelled', 'quarantined', 'undecodable')
          AND OLD.state IS DISTINCT FROM NEW.state
          AND NEW.headers LIKE '%"headgate-result"%')
    EXECUTE FUNCTION headgate_finished_notify();

CREATE OR REPLACE TRIGGER jobs_deleted_notify AFTER DELETE ON jobs
    FOR EACH ROW
    WHEN (OLD.state NOT IN ('completed', 'archived', 'cancelled', 'quarantined', 'undecodable')
          AND OLD.headers LIKE '%"headgate-result"%')
    EXECUTE FUNCTION headgate_finished_notify();
