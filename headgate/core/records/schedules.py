"""Periodic schedules as the store keeps them, and the enqueue events of their ticks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Schedule:
    """A stored schedule: the job template each tick enqueues (kind, payload and the
    envelope fields), its spec and when it next fires, what happens to missed ticks
    (`on_missed`, `backfill_limit`), and whether it is paused. `next_run_ms` and the
    timestamps are the store's to set."""

    id: str
    kind: str
    payload: bytes
    queue: str
    partition_key: str
    rate_class: str
    priority: int
    max_attempts: int
    retention_ms: int
    spec: str
    next_run_ms: int
    last_enqueued_ms: int | None
    on_missed: str
    backfill_limit: int
    paused: bool
    created_at_ms: int
    updated_at_ms: int


@dataclass(frozen=True, slots=True)
class ScheduleEventEntry:
    """What became of one tick (or run-now) of a schedule: `outcome` enqueued,
    deduplicated, failed or skipped, with the job it made (if any) and why."""

    event_id: int
    schedule_id: str
    tick_ms: int
    job_id: str | None
    outcome: str
    reason: str
    recorded_at_ms: int
