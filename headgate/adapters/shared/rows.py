"""Row ↔ model mapping shared by the SQLite modules."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from headgate.core import Job, State
from headgate.core.schema_constants import (
    ERROR_TEXT_MAX_CHARS,
    HISTORY_BUCKET_MS,
    MAX_ERRORS_KEPT,
)

from .queries import load

JOB_FIELDS: tuple[str, ...] = (
    "id", "kind", "queue", "state", "schema_version", "priority", "partition_key",
    "rate_class", "weight", "fingerprint", "scheduled_at_ms", "max_attempts", "retention_ms",
    "tags", "sticky_worker", "headers", "attempt", "crash_attempt", "fence", "lease_id",
    "lease_expires_at_ms", "worker_id", "enqueued_at_ms", "attempted_at_ms",
    "finalized_at_ms", "errors", "periodic_schedule_id", "periodic_tick_ms",
    "cancel_requested", "was_pending",
)
JOB_COLUMNS = ", ".join(JOB_FIELDS)
JOB_COLUMNS_WITH_PAYLOAD = JOB_COLUMNS + ", payload"
_TAGS = JOB_FIELDS.index("tags")
_HEADERS = JOB_FIELDS.index("headers")
_ERRORS = JOB_FIELDS.index("errors")


def row_to_job(row: Sequence) -> Job:
    """Build a Job from a row selected with JOB_COLUMNS (payload optional, last).
    The empty JSON values every fresh job carries skip the parser."""
    payload = row[len(JOB_FIELDS)] if len(row) > len(JOB_FIELDS) else None
    return Job(
        id=row[0],
        kind=row[1],
        queue=row[2],
        state=State(row[3]),
        schema_version=row[4],
        priority=row[5],
        partition_key=row[6],
        rate_class=row[7],
        weight=row[8],
        fingerprint=row[9],
        scheduled_at_ms=row[10],
        max_attempts=row[11],
        retention_ms=row[12],
        tags=() if row[_TAGS] == "[]" else tuple(json.loads(row[_TAGS])),
        sticky_worker=row[14],
        headers={} if row[_HEADERS] == "{}" else json.loads(row[_HEADERS]),
        attempt=row[16],
        crash_attempt=row[17],
        fence=row[18],
        lease_id=row[19],
        lease_expires_at_ms=row[20],
        worker_id=row[21],
        enqueued_at_ms=row[22],
        attempted_at_ms=row[23],
        finalized_at_ms=row[24],
        errors=[] if row[_ERRORS] == "[]" else json.loads(row[_ERRORS]),
        periodic_schedule_id=row[26],
        periodic_tick_ms=row[27],
        cancel_requested=bool(row[28]),
        pending=bool(row[29]),
        payload=bytes(payload) if payload is not None else None,
    )


def tags_text(tags: Sequence[str]) -> str:
    """The stored text of a job's tags: both engines write it, so an id's identity
    compares equal whichever wrote it."""
    return json.dumps(list(tags)) if tags else "[]"


def headers_text(headers: Mapping[str, str]) -> str:
    return json.dumps(headers) if headers else "{}"


def minute(now: int) -> int:
    return now - now % HISTORY_BUCKET_MS


Q = load(__name__)
BUMP_HISTORY = Q["bump_history"]

HISTORY_KEYS = (
    "arrived", "completed", "failed",
    "rejected_rate_class", "rejected_concurrency_limit", "rejected_quarantine",
)


def bump_history(conn, now: int, deltas: dict[str, dict[str, int]]) -> None:
    """Add per-queue deltas (keys of HISTORY_KEYS) to the current minute bucket.

    The rejection counts are not added but kept at their largest: one admission pass
    counts the jobs it turned away, and every worker's poll passes over the same
    waiting jobs again, so a sum counted polls (111,175 "rejections" of 4 jobs in a
    quarter of an hour). The largest pass of the minute is how many jobs were held
    back in it; summed over minutes it is job-minutes."""
    bucket = minute(now)
    rows = [
        (queue, bucket, *(d.get(k, 0) for k in HISTORY_KEYS))
        for queue, d in deltas.items()
        if any(d.values())
    ]
    if rows:
        conn.executemany(BUMP_HISTORY, rows)


def error_entry(
    attempt: int, now: int, error: str | None, logs: Sequence[str], worker: str | None,
    outcome: str,
) -> dict:
    return {
        "attempt": attempt,
        "at_ms": now,
        "error": (error or "")[:ERROR_TEXT_MAX_CHARS],
        "logs": [line[:1024] for line in list(logs)[-50:]],
        "worker": worker,
        "outcome": outcome,
    }


def append_error(errors_json: str, entry: dict) -> str:
    errors = json.loads(errors_json)
    errors.append(entry)
    return json.dumps(errors[-MAX_ERRORS_KEPT:])
