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
from headgate.adapters.shared.queries import load
from headgate.core import Envelope

Q = load(__name__)
LOCK_AND_CHECK = Q["lock_and_check"]
COPY_JOBS = Q["copy_jobs"]
WAKE = Q["wake"]


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
