"""Periodic schedules, their enqueue events, and the maintenance writes the duties need.

Each function runs inside a transaction its caller opened (`conn`, `now` from the
store clock), in the SQL subset SQLite and PostgreSQL share, like the other modules
here. The firing loop itself (several transactions per schedule, by design: enqueue,
then record, then advance) is a service, `headgate/services/scheduling.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from headgate.core import (
    TERMINAL,
    UNFINISHED,
    Envelope,
    InvalidInput,
    NotFound,
    State,
    schedule_spec,
)
from headgate.core.envelope import check_int, check_text
from headgate.core.policy import ON_MISSED, RUN_NOW_REPLAY_MS
from headgate.core.records import Schedule, ScheduleEventEntry
from headgate.core.schema_constants import HISTORY_BUCKET_MS

from .conn import Connection
from .queries import fill, load

# Ticks enqueued for one schedule in one firing; a larger backlog is not a backfill but
# a flood, and every tick is one transaction.
MAX_BACKFILL = 1000
MAX_SCHEDULE_ID = 200
EVENTS_KEPT = 100
MAX_EVENTS_PAGE = 1000
OUTCOMES = ("enqueued", "deduplicated", "failed", "skipped")

SCHEDULE_FIELDS = (
    "id", "kind", "payload", "queue", "partition_key", "rate_class", "priority",
    "max_attempts", "retention_ms", "spec", "next_run_ms", "last_enqueued_ms", "on_missed",
    "backfill_limit", "paused", "created_at_ms", "updated_at_ms",
)
SCHEDULE_COLUMNS = ", ".join(SCHEDULE_FIELDS)
# Keys a caller may send back unchanged (e.g. a Schedule from get_schedule); the store
# owns their values.
READ_ONLY_KEYS = frozenset({"next_run_ms", "last_enqueued_ms", "created_at_ms", "updated_at_ms"})
DEFAULTS: dict[str, Any] = {
    "payload": b"", "queue": "default", "partition_key": "", "rate_class": "", "priority": 0,
    "max_attempts": 25, "retention_ms": 0, "on_missed": "skip", "backfill_limit": 0,
    "paused": False,
}
_TERMINAL_KEPT = tuple(sorted(s.value for s in TERMINAL if s is not State.QUARANTINED))
_TERMINAL_MARKS = ", ".join(f"'{s}'" for s in _TERMINAL_KEPT)
_UNFINISHED_MARKS = ", ".join(f"'{s.value}'" for s in sorted(UNFINISHED))

Q = load(__name__)
SELECT_SCHEDULE = fill(Q["select_schedule"], columns=SCHEDULE_COLUMNS)
LIST_SCHEDULES = fill(Q["list_schedules"], columns=SCHEDULE_COLUMNS)
UPSERT = fill(Q["upsert_schedule"], columns=SCHEDULE_COLUMNS,
              marks=", ".join("?" * len(SCHEDULE_FIELDS)))
DELETE_SCHEDULE = Q["delete_schedule"]
DELETE_SCHEDULE_RUNS = Q["delete_schedule_runs"]
DUE_SCHEDULES = fill(Q["due_schedules"], columns=SCHEDULE_COLUMNS)
INSERT_EVENT = Q["insert_event"]
PRUNE_EVENTS = Q["prune_events"]
LIST_EVENTS = Q["list_events"]
ADVANCE = Q["advance"]
PARK = Q["park"]
TOUCH_ENQUEUED = Q["touch_enqueued"]
FIND_RUN = Q["find_run"]
FORGET_OLD_RUNS = Q["forget_old_runs"]
INSERT_RUN = Q["insert_run"]
SELECT_RUN = Q["select_run"]
FORGET_WORKERS = Q["forget_workers"]
UNFINISHED_BY_QUEUE = fill(Q["unfinished_by_queue"], states=_UNFINISHED_MARKS)
RECORD_DEPTH = Q["record_depth"]
PRUNABLE_COUNTS = fill(Q["prunable_counts"], states=_TERMINAL_MARKS)
PRUNE_TERMINAL = fill(Q["prune_terminal"], states=_TERMINAL_MARKS)


def validate_schedule(schedule: Schedule | Mapping[str, Any]) -> dict[str, Any]:
    """A checked copy with defaults filled; InvalidInput names the first problem.

    Job fields go through Envelope validation so a schedule cannot hold a template that
    every tick would then fail to enqueue."""
    if isinstance(schedule, Schedule):
        schedule = asdict(schedule)
    if not isinstance(schedule, Mapping):
        raise InvalidInput("schedule must be a mapping")
    unknown = set(schedule) - set(SCHEDULE_FIELDS) - {"paused"}
    if unknown:
        raise InvalidInput(f"unknown schedule field: {sorted(unknown)[0]}")
    for key in ("id", "kind", "spec"):
        if key not in schedule:
            raise InvalidInput(f"schedule field {key} is required")
    out = {**DEFAULTS, **{k: v for k, v in schedule.items() if k not in READ_ONLY_KEYS}}
    check_text("schedule id", out["id"], 1, MAX_SCHEDULE_ID)
    schedule_spec.validate(out["spec"])
    if isinstance(out["payload"], bytearray | memoryview):
        out["payload"] = bytes(out["payload"])
    Envelope(
        kind=out["kind"], payload=out["payload"], queue=out["queue"],
        partition_key=out["partition_key"], rate_class=out["rate_class"],
        priority=out["priority"], max_attempts=out["max_attempts"],
        retention_ms=out["retention_ms"],
    ).validated()
    if out["on_missed"] not in ON_MISSED:
        raise InvalidInput(f"on_missed must be {'|'.join(ON_MISSED)}")
    check_int("backfill_limit", out["backfill_limit"], 0, MAX_BACKFILL)
    if not isinstance(out["paused"], bool):
        raise InvalidInput("paused must be a boolean")
    out["spec"] = out["spec"].strip()
    return out


def _row(row: Sequence[Any]) -> Schedule:
    out = dict(zip(SCHEDULE_FIELDS, row, strict=True))
    out["payload"] = bytes(out["payload"])
    out["paused"] = bool(out["paused"])
    return Schedule(**out)


def get(conn: Connection, schedule_id: str) -> Schedule | None:
    row = conn.execute(SELECT_SCHEDULE, (schedule_id,)).fetchone()
    return _row(row) if row is not None else None


def list_all(conn: Connection) -> list[Schedule]:
    return [_row(r) for r in conn.execute(LIST_SCHEDULES)]


def upsert(conn: Connection, now: int, checked: dict[str, Any]) -> Schedule:
    """Insert or replace a validated schedule.

    `next_run_ms` is kept when the spec is unchanged (re-deploying the same schedule
    must not shift or replay ticks) and re-anchored to the first tick after now when the
    spec changed, the row is new, or a paused schedule is resumed: ticks suppressed
    while paused are not "missed", so resuming does not replay them."""
    old = get(conn, checked["id"])
    resumed = old is not None and old.paused and not checked["paused"]
    if old is not None and old.spec == checked["spec"] and not resumed:
        next_run = old.next_run_ms
    else:
        next_run = schedule_spec.next_after(checked["spec"], now)
    row = {
        **checked,
        "next_run_ms": next_run,
        "last_enqueued_ms": old.last_enqueued_ms if old else None,
        "created_at_ms": old.created_at_ms if old else now,
        "updated_at_ms": now,
        "paused": int(checked["paused"]),
    }
    conn.execute(UPSERT, [row[k] for k in SCHEDULE_FIELDS])
    stored = get(conn, checked["id"])
    assert stored is not None
    return stored


def delete(conn: Connection, schedule_id: str) -> None:
    """Remove the schedule and its run-now records; its events stay for the audit."""
    if conn.execute(DELETE_SCHEDULE, (schedule_id,)).rowcount == 0:
        raise NotFound("schedule", schedule_id)
    conn.execute(DELETE_SCHEDULE_RUNS, (schedule_id,))


def due(conn: Connection, now: int, limit: int) -> list[Schedule]:
    return [_row(r) for r in conn.execute(DUE_SCHEDULES, (now, limit))]


# -- events -------------------------------------------------------------------------

def record_events(
    conn: Connection, now: int, schedule_id: str,
    events: Sequence[tuple[int, str | None, str, str]],
) -> None:
    """Append (tick_ms, job_id, outcome, reason) rows and keep the newest EVENTS_KEPT."""
    if not events:
        return
    for _, _, outcome, _ in events:
        assert outcome in OUTCOMES, outcome
    conn.executemany(INSERT_EVENT, [
        (schedule_id, tick, job_id, outcome, reason, now)
        for tick, job_id, outcome, reason in events
    ])
    conn.execute(PRUNE_EVENTS, (schedule_id, schedule_id, EVENTS_KEPT))


def list_events(
    conn: Connection, schedule_id: str, cursor: int | None, limit: int
) -> list[ScheduleEventEntry]:
    """Newest first; `cursor` is the last event_id of the previous page."""
    check_text("schedule id", schedule_id, 1, MAX_SCHEDULE_ID)
    check_int("limit", limit, 1, MAX_EVENTS_PAGE)
    if cursor is not None:
        check_int("cursor", cursor, 0)
    rows = conn.execute(
        LIST_EVENTS, (schedule_id, cursor if cursor is not None else 2**63 - 1, limit),
    ).fetchall()
    return [ScheduleEventEntry(*r) for r in rows]


def advance(
    conn: Connection, now: int, schedule: Mapping[str, Any], next_run: int,
    enqueued: bool,
) -> bool:
    """Move next_run_ms on, unless the row changed since it was read (compare-and-set on
    spec and next_run_ms): a concurrent upsert's re-anchoring wins."""
    cur = conn.execute(ADVANCE, (next_run, int(enqueued), now, schedule["id"],
                                 schedule["spec"], schedule["next_run_ms"]))
    return cur.rowcount == 1


def park(conn: Connection, now: int, schedule: Mapping[str, Any]) -> bool:
    """Pause a schedule unless it changed since it was read (as `advance`)."""
    cur = conn.execute(PARK, (now, schedule["id"], schedule["spec"],
                              schedule["next_run_ms"]))
    return cur.rowcount == 1


def touch_enqueued(conn: Connection, now: int, schedule_id: str) -> None:
    conn.execute(TOUCH_ENQUEUED, (now, schedule_id))


# -- run now ------------------------------------------------------------------------


def find_run(conn: Connection, now: int, schedule_id: str, key: str) -> str | None:
    row = conn.execute(FIND_RUN, (schedule_id, key, now - RUN_NOW_REPLAY_MS)).fetchone()
    return row[0] if row is not None else None


def remember_run(
    conn: Connection, now: int, schedule_id: str, key: str, job_id: str
) -> str:
    """Record which job `key` produced; returns the job a concurrent twin recorded first."""
    conn.execute(FORGET_OLD_RUNS, (now - RUN_NOW_REPLAY_MS,))
    conn.execute(INSERT_RUN, (schedule_id, key, job_id, now))
    row = conn.execute(SELECT_RUN, (schedule_id, key)).fetchone()
    return row[0]


# -- maintenance --------------------------------------------------------------------


def forget_workers(conn: Connection, now: int, older_than_ms: int) -> int:
    return conn.execute(FORGET_WORKERS, (now - older_than_ms,)).rowcount


def record_queue_depths(conn: Connection, now: int) -> int:
    """Write each queue's unfinished count (from the maintained counters) into the
    current minute bucket."""
    rows = conn.execute(UNFINISHED_BY_QUEUE).fetchall()
    bucket = now - now % HISTORY_BUCKET_MS
    conn.executemany(RECORD_DEPTH, [(queue, bucket, int(depth)) for queue, depth in rows])
    return len(rows)


def prunable_counts(conn: Connection, cutoff: int) -> dict[str, int]:
    counts = {state: 0 for state in _TERMINAL_KEPT}
    for state, n in conn.execute(PRUNABLE_COUNTS, (cutoff,)):
        counts[state] = int(n)
    return counts


def prune_batch(conn: Connection, cutoff: int, limit: int) -> tuple[int, set[str]]:
    rows = conn.execute(PRUNE_TERMINAL, (cutoff, limit)).fetchall()
    return len(rows), {r[0] for r in rows}
