"""A pure admit from one queue, decided by one plain statement when no policy has a say.

A worker woken for one queue admits without acks: the function's decision reduces to
"the first `capacity` available jobs in (priority, arrival) order" when no policy has
anything to say (the queue open, no quarantine, no ceiling on it, no due job to
promote, at most one partition waiting and its round-robin state settled, candidates
without a rate class or another worker's stickiness). Then this one plain statement
claims them: no PL/pgSQL frame, whose per-transaction set-up is most of a woken
worker's first call. Anything else runs the function, in the same statement. The
queue's lock is taken first, as by the function; the statement's snapshot predates
it, so a pause, ceiling, quarantine or enqueue committed while it waited applies from
the next admit on (the claims are what an admit just before that commit would have
made; the row locks re-check each candidate's state). A last row with lost_id ''
says the plain path ran.
"""

from __future__ import annotations

import psycopg

ADMIT_ONE_QUEUE = """
WITH clock AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms,
           pg_advisory_xact_lock(hashtextextended(%(queue)s::text, 7)) AS locked
), open_queue AS MATERIALIZED (
    SELECT q.rr_cursor FROM queues q, clock
    WHERE q.name = %(queue)s::text AND q.paused = 0
      AND NOT EXISTS (SELECT 1 FROM quarantine)
      AND NOT EXISTS (SELECT 1 FROM concurrency_limits WHERE queue = %(queue)s::text)
      AND NOT EXISTS (SELECT 1 FROM jobs WHERE state IN ('scheduled', 'retryable')
                      AND scheduled_at_ms <= clock.now_ms AND queue = %(queue)s::text)
), waiting AS MATERIALIZED (
    SELECT partition_key, deficit FROM partitions
    WHERE queue = %(queue)s::text AND waiting > 0 AND EXISTS (SELECT 1 FROM open_queue)
    LIMIT 2
), served AS MATERIALIZED (
    SELECT w.partition_key FROM waiting w, open_queue q
    WHERE (SELECT count(*) FROM waiting) = 1 AND w.deficit = 0
      AND q.rr_cursor IS NOT DISTINCT FROM w.partition_key
), candidates AS MATERIALIZED (
    SELECT id, rate_class, sticky_worker FROM jobs
    WHERE queue = %(queue)s::text AND partition_key = (SELECT partition_key FROM served)
      AND state = 'available'
    ORDER BY priority DESC, rowid LIMIT %(capacity)s::bigint
    FOR UPDATE SKIP LOCKED
), decided AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM open_queue)
           AND ((SELECT count(*) FROM waiting) = 0 OR EXISTS (SELECT 1 FROM served))
           AND NOT EXISTS (SELECT 1 FROM candidates
                           WHERE rate_class <> ''
                              OR sticky_worker NOT IN ('', %(worker)s::text)) AS plain
), claimed AS (
    UPDATE jobs SET state = 'running', fence = fence + 1, lease_id = %(lease_id)s::text,
        lease_expires_at_ms = (SELECT now_ms FROM clock) + %(lease_ms)s::bigint,
        worker_id = %(worker)s::text, attempted_at_ms = (SELECT now_ms FROM clock),
        cancel_requested = 0
    WHERE id = ANY(ARRAY(SELECT id FROM candidates)) AND state = 'available'
      AND (SELECT plain FROM decided)
    RETURNING *
)
(SELECT NULL::text, j.id, j.kind, j.queue, j.state, j.schema_version, j.priority,
        j.partition_key, j.rate_class, j.weight, j.fingerprint, j.scheduled_at_ms,
        j.max_attempts, j.retention_ms, j.tags, j.sticky_worker, j.headers, j.attempt,
        j.crash_attempt, j.fence, j.lease_id, j.lease_expires_at_ms, j.worker_id,
        j.enqueued_at_ms, j.attempted_at_ms, j.finalized_at_ms, j.errors,
        j.periodic_schedule_id, j.periodic_tick_ms, j.cancel_requested, j.was_pending,
        j.payload
 FROM claimed j ORDER BY j.priority DESC, j.rowid)
UNION ALL
SELECT (jsonb_populate_record(NULL::headgate_admitted, '{"lost_id": ""}')).*
FROM decided WHERE decided.plain
UNION ALL
SELECT f.* FROM decided d, LATERAL headgate_admit_v2(%(worker)s::text, ARRAY[%(queue)s::text],
    %(capacity)s::bigint, %(lease_ms)s::bigint, NULL::bigint, %(lease_id)s::text,
    NULL::bigint, '{}'::text[], '{}'::text[], '{}'::text[], '{}'::bigint[], '{}'::bytea[],
    '{}'::integer[]) AS f
WHERE NOT d.plain
"""


def run(raw: psycopg.Connection, worker_id: str, queue: str, capacity: int, lease_ms: int,
        lease_id: str) -> tuple[list[tuple], bool]:
    """The statement's rows (headgate_admitted) and whether it decided alone."""
    rows = raw.execute(ADMIT_ONE_QUEUE, {
        "queue": queue, "worker": worker_id, "capacity": capacity, "lease_ms": lease_ms,
        "lease_id": lease_id,
    }).fetchall()
    plain = bool(rows) and rows[-1][0] == ""
    return (rows[:-1] if plain else rows), plain
