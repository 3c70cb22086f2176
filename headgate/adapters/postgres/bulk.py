"""A batch enqueue by COPY: the function's early exit for batches.

`headgate_enqueue_v3` inserts a batch with `INSERT … SELECT FROM unnest(…)` of one array
per column; COPY of the same rows costs the server about a quarter less (figures in
docs/PERFORMANCE.md, PostgreSQL W2).
A batch goes this way when the function would decide nothing for it but the insert: no
unique keys, every queue already has a row and no enqueue limit, no fingerprint is
quarantined (the gate the function and the plain statement call), every id is new. The
queue locks and those checks are one statement (its snapshot predates the locks, as
ENQUEUE_PLAIN's does: a quarantine or a limit committed in between applies from the next
enqueue on); then the COPY, whose rows are the ones SQLite's batch inserts
(`_insert_row`; the insert trigger counts them and their arrivals), and the wake-up
NOTIFY with the COMMIT. A batch that fails a check, or whose COPY meets an id that
exists, is rolled back and left to the function, which decides it. Three round trips
against one, ~0.5 ms of a batch's ~20.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import cast

import psycopg

from headgate.adapters.shared.enqueue_rows import EnqueueResult, insert_row
from headgate.core import Envelope

from .connection import CLOCK

# The queues' locks in the order every enqueue and admission takes them (sorted, "C"),
# then whether the batch may skip the function: the function's own gate
# (headgate_enqueue_gate_v1, db/postgres/functions/checks.sql; the queues distinct).
LOCK_AND_CHECK = f"""
SELECT ({CLOCK}), gate.plain
FROM (SELECT count(headgate_lock_queue_v1(u.name))
      FROM unnest(%(queues)s::text[]) AS u(name)) AS locked,
     headgate_enqueue_gate_v1(%(queues)s::text[], %(fingerprints)s::text[]) AS gate
"""
COPY_JOBS = """
COPY jobs (id, kind, schema_version, payload, fingerprint, queue, priority, partition_key,
    rate_class, weight, state, scheduled_at_ms, max_attempts, retention_ms, tags,
    sticky_worker, headers, enqueued_at_ms, periodic_schedule_id, periodic_tick_ms,
    was_pending) FROM STDIN
"""
# The function's wake-up NOTIFY (checks.sql), sent with the COMMIT.
WAKE = "SELECT headgate_wake_v1(%(origin)s::text, %(queues)s::text[])"


def qualifies(envs: Sequence[Envelope]) -> bool:
    return len(envs) > 1 and all(e.unique_key is None for e in envs)


def copy_batch(raw: psycopg.Connection, envs: Sequence[Envelope],
               origin: str | None) -> EnqueueResult | None:
    """The batch inserted on `raw` (autocommit, no transaction open), or None with
    nothing written when the function must decide it."""
    queues = sorted({e.queue for e in envs})
    fingerprints = sorted(cast("set[str]", {e.fingerprint for e in envs}))  # validated: all set
    raw.execute("BEGIN")
    try:
        now, plain = raw.execute(LOCK_AND_CHECK, {
            "queues": queues, "fingerprints": fingerprints}).fetchone()  # type: ignore[misc]
        if not plain:
            raw.execute("ROLLBACK")
            return None
        with raw.cursor() as cur, cur.copy(COPY_JOBS) as rows:
            for env in envs:
                rows.write_row(insert_row(env, now))
    except psycopg.errors.UniqueViolation:
        raw.execute("ROLLBACK")  # an id that exists: a replay or a conflict
        return None
    except BaseException:
        with contextlib.suppress(psycopg.Error):  # a lost connection is closed by the pool
            raw.execute("ROLLBACK")
        raise
    with raw.pipeline():
        if origin is not None:
            raw.execute(WAKE, {"origin": origin, "queues": queues})
        raw.execute("COMMIT")
    return EnqueueResult(ids=[e.id for e in envs], inserted=len(envs),  # type: ignore[misc]
                         queues=set(queues))
