-- Workers that take part over HTTP (the worker protocol under /api/v1) say what they
-- are: `agent` is the string they registered with (a language and library, e.g.
-- `node/20 example-worker/1`), NULL for a worker that runs in Python on the store
-- itself; `kinds` the JSON list of job kinds they handle (NULL or `[]`: every kind).
-- The same columns as db/sqlite/0023_worker_agent.sql.
ALTER TABLE workers ADD COLUMN agent TEXT;
ALTER TABLE workers ADD COLUMN kinds TEXT;
