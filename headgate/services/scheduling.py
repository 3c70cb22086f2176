"""Firing periodic schedules: the scheduler duty's tick and run-now.

A service over the store port: the store keeps schedules and gives the one-transaction
steps (`due_schedules`, `enqueue_tick`, `record_schedule_events`, `park_schedule`,
`find_schedule_run`, `remember_schedule_run`); the decisions are made here.

Firing a schedule is deliberately NOT one transaction. Each tick's job goes through a
producer `Client` (so the enqueue authorizer, middleware and hooks see periodic jobs,
with `EnqueueContext(source="periodic")`) in its own transaction, which also moves
`next_run_ms` past that tick by compare-and-set on (spec, next_run_ms); then one
transaction records the enqueue events and advances `next_run_ms` past now. So a tick
is enqueued at most once whoever fires it: a scheduler whose snapshot went stale (a
twin fired the schedule meanwhile, or the job it enqueued already ran and, with
retention 0, was deleted) finds the row moved and stops. A crash before the events are
recorded loses only the events of ticks already enqueued.

`still_held` (the scheduler duty passes its lease check) is asked before every
schedule and tick: a scheduler that lost its duty lease stops mid-run.

A schedule whose next tick cannot be computed (a spec stored before validation
rejected it, or the calendar's end) is paused with a `failed` event (`no_next_tick`)
rather than left due and fired again every scheduler tick.

`on_missed` (skip and run_once enqueue at most the latest due tick; the rest is decided
here):
- `skip`: on time — the oldest unfired tick is at most `misfire_grace_ms` old — the
  latest due tick is enqueued (earlier ones a slow scheduler tick ran past are
  dropped). Late — the scheduler was down or stalled for longer than the grace — no job
  is enqueued: one `skipped` event (reason `missed`) is recorded for the latest due tick
  and the schedule waits for its next tick. "Skip" means a missed run stays missed.
- `run_once`: the latest due tick is always enqueued, however late: a missed run
  happens once on recovery, never once per missed tick.
- `backfill`: the most recent `max(backfill_limit, 1)` due ticks are enqueued, oldest
  first, however late (`backfill_limit` 0 therefore behaves as run_once). When more
  were due, the newest tick left out gets a `skipped` event (reason `backfill_limit`).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from headgate.core import (
    Backpressure,
    CircuitOpen,
    Duplicate,
    EnqueueForbidden,
    Envelope,
    IdConflict,
    InvalidInput,
    NotFound,
    Quarantined,
    StoreUnavailable,
    schedule_spec,
)
from headgate.core.envelope import check_int, check_text
from headgate.core.ids import new_id
from headgate.core.policy import RUN_NOW_REPLAY_MS
from headgate.core.records import Schedule
from headgate.services.client import Client, EnqueueContext
from headgate.store.port import ScheduleEvent, ScheduleStep, Store

log = logging.getLogger("headgate.periodic")

DEFAULT_MISFIRE_GRACE_MS = 60_000
DEFAULT_FIRE_LIMIT = 100
MAX_IDEMPOTENCY_KEY = 255
ENQUEUE_ATTEMPTS = 3


def tick_job_id(schedule_id: str, tick_ms: int) -> str:
    """The one job id a (schedule, tick) can ever have, in the shape of a generated id:
    the tick's instant (12 hex digits of ms), then 16 hex digits of the schedule id's
    SHA-256. Job lists page newest first by id, so a tick's job sorts where a job made
    at its tick would; a readable `periodic:…` id sorted above every generated one, for
    as long as it was kept. The job names its schedule and tick in its own fields."""
    digest = hashlib.sha256(schedule_id.encode()).hexdigest()[:16]
    return f"{tick_ms:012x}{digest}"


def run_unique_key(schedule_id: str, idempotency_key: str) -> bytes:
    """The unique key (kind-less, held for the replay window) a run-now job is enqueued
    under: two concurrent calls with one Idempotency-Key make one job between them,
    while the job itself takes a generated id and so sorts by its age in job lists."""
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]
    return f"headgate:run-now:{schedule_id}:{digest}".encode()


def _failure(exc: BaseException) -> tuple[str, str, str | None]:
    """(outcome, stable reason, job id) for an enqueue that raised."""
    if isinstance(exc, IdConflict):
        # The tick's id exists with other content: the schedule was edited after this
        # tick was enqueued. The tick did run once; it must not run again.
        return "deduplicated", "id_conflict", exc.job_id
    if isinstance(exc, Duplicate):
        return "deduplicated", "unique_key", exc.existing_id
    reasons: tuple[tuple[type[BaseException], str], ...] = (
        (EnqueueForbidden, "forbidden"),
        (Backpressure, "backpressure"),
        (Quarantined, "quarantined"),
        (CircuitOpen, "circuit_open"),
        (StoreUnavailable, "store_unavailable"),
        (InvalidInput, "invalid"),
    )
    for kind, reason in reasons:
        if isinstance(exc, kind):
            return "failed", reason, None
    return "failed", "error", None


@dataclass
class _Advance:
    """A tick's step and what became of it: committed with the insert, or not at all
    (then the insert rolled back and `superseded` is set)."""

    step: ScheduleStep
    committed: bool = False
    superseded: bool = False


class _Superseded(Exception):
    """The schedule moved since it was read: another scheduler fired it, or it was
    edited. Raised out of the tick's insert, through the client's middleware."""


class _TickInserter:
    """Stands in for the store inside a copy of the caller's Client, so the firing loop
    learns whether the tick's job was inserted now or already existed — the difference
    between an `enqueued` and a `deduplicated` event — from the same transaction, in
    which the store also moves the schedule on (`advance`, once per tick)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.inserted: set[str] = set()
        self.advance: _Advance | None = None

    def enqueue_many(self, envelopes: Sequence[Envelope]) -> list[str]:
        pending = self.advance  # kept until it commits, for _enqueue_retrying's retries
        done = self.store.enqueue_tick(envelopes, pending.step if pending else None)
        if done.moved:
            assert pending is not None
            pending.superseded = True
            raise _Superseded(pending.step.schedule_id)
        if pending is not None:
            pending.committed, self.advance = True, None
        if done.duplicate is not None:
            raise done.duplicate
        self.inserted.update(done.inserted)
        return done.ids


def _producer(store: Store, client: Client | None) -> tuple[Client, _TickInserter]:
    """A shallow copy of the caller's client (its authorizer, middleware, hooks and
    circuit breaker) whose inserts go through the tick inserter."""
    inserter = _TickInserter(store)
    producer = copy.copy(client) if client is not None else Client(store)
    producer.store = inserter  # type: ignore[assignment]
    return producer, inserter


def fire_due_schedules(
    store: Store, now_ms: int | None = None, limit: int = DEFAULT_FIRE_LIMIT, *,
    client: Client | None = None, misfire_grace_ms: int = DEFAULT_MISFIRE_GRACE_MS,
    still_held: Callable[[], bool] | None = None,
) -> int:
    """The scheduler duty's tick: fire every unpaused schedule whose next_run_ms has
    come (at most `limit` schedules, most overdue first). Returns the number of jobs
    enqueued. `now_ms` evaluates due-ness as of an earlier instant (never later than
    the store clock: a tick must not fire before it is due). `client` supplies the
    enqueue authorizer, middleware and hooks. `still_held` returning False stops the
    run before the next schedule or tick: the caller's duty lease lapsed and another
    scheduler may be firing the same schedules."""
    check_int("limit", limit, 1)
    check_int("misfire_grace_ms", misfire_grace_ms, 0)
    store_now = store.now_ms()
    if now_ms is None:
        now_ms = store_now
    elif check_int("now_ms", now_ms, 0) > store_now:
        raise InvalidInput("now_ms must not be later than the store clock")
    schedules = store.due_schedules(now_ms, limit)
    producer, inserter = _producer(store, client)
    held = still_held or (lambda: True)
    enqueued = 0
    for schedule in schedules:
        if not held():
            log.warning("scheduler lost its duty lease: stopping this run")
            break
        try:
            enqueued += _fire(store, schedule, now_ms, producer, inserter,
                              misfire_grace_ms, held)
        except Exception:  # noqa: BLE001 - one bad schedule must not starve the rest
            log.exception("periodic schedule %s failed to fire", schedule.id)
    return enqueued


def _plan(schedule: Schedule, now: int,
          grace_ms: int) -> tuple[list[tuple[int, str]], list[ScheduleEvent]]:
    """Which ticks to enqueue (with their event reason), and skip events."""
    spec, next_run = schedule.spec, schedule.next_run_ms
    latest = schedule_spec.ticks_between(spec, next_run - 1, now, 1)
    if not latest:
        return [], []
    tick = latest[0]
    policy = schedule.on_missed
    if policy == "backfill":
        limit = max(1, schedule.backfill_limit)
        ticks = schedule_spec.ticks_between(spec, next_run - 1, now, limit)
        # Older due ticks than the limit reaches are dropped: the newest of them is
        # recorded, so the event log shows where the backfill began to leave ticks out.
        # Fewer ticks than the limit: none was left out, nothing to look for.
        dropped = (schedule_spec.ticks_between(spec, next_run - 1, ticks[0] - 1, 1)
                   if len(ticks) == limit else [])
        return ([(t, "scheduled" if t == tick else "backfill") for t in ticks],
                [(t, None, "skipped", "backfill_limit") for t in dropped])
    if policy == "skip" and now - next_run > grace_ms:
        return [], [(tick, None, "skipped", "missed")]
    return [(tick, "scheduled")], []


def _fire(store: Store, schedule: Schedule, now: int, producer: Client,
          inserter: _TickInserter, grace_ms: int, held: Callable[[], bool]) -> int:
    try:
        next_run = schedule_spec.next_after(schedule.spec, now)
        plan, events = _plan(schedule, now, grace_ms)
    except InvalidInput as exc:
        _park(store, schedule, exc)
        return 0
    context = EnqueueContext(source="periodic")
    enqueued = 0
    expected = schedule.next_run_ms
    stopped = False
    # Backfill ticks are consecutive, so each one's successor is the next in the plan.
    successors = [t for t, _ in plan[1:]] + [next_run] if plan else []
    for (tick, reason), successor in zip(plan, successors, strict=True):
        if not held():
            stopped = True
            break
        job_id = tick_job_id(schedule.id, tick)
        pending = _Advance(ScheduleStep(schedule.id, schedule.spec, expected, successor))
        inserter.advance = pending
        try:
            _enqueue_retrying(producer, _envelope(schedule, job_id, tick), context)
        except Exception as exc:  # noqa: BLE001 - recorded as the tick's outcome
            if pending.superseded:
                stopped = True
                break
            if pending.committed:  # e.g. a unique-key duplicate: the tick is done
                expected = successor
            outcome, why, existing = _failure(exc)
            if why == "error":
                log.exception("periodic schedule %s tick %s", schedule.id, tick)
            events.append((tick, existing, outcome, why))
            continue
        finally:
            inserter.advance = None
        if pending.superseded:  # a middleware swallowed the stop
            stopped = True
            break
        if pending.committed:
            expected = successor
        if job_id in inserter.inserted:
            enqueued += 1
            events.append((tick, job_id, "enqueued", reason))
        else:
            events.append((tick, job_id, "deduplicated", "exists"))
    step = None if stopped else ScheduleStep(schedule.id, schedule.spec, expected,
                                              next_run)
    store.record_schedule_events(schedule.id, sorted(events), step, enqueued > 0)
    return enqueued


def _park(store: Store, schedule: Schedule, exc: InvalidInput) -> None:
    """Pause a schedule that has no next tick: left due, it would be fired (and fail)
    on every scheduler tick."""
    log.warning("periodic schedule %s paused: %s", schedule.id, exc)
    store.park_schedule(schedule.id, schedule.spec, schedule.next_run_ms,
                        [(schedule.next_run_ms, None, "failed", "no_next_tick")])


def run_schedule_now(
    store: Store, schedule_id: str, idempotency_key: str, *, client: Client | None = None,
    context: EnqueueContext | None = None,
) -> tuple[str, bool]:
    """Enqueue one extra job from the schedule now, without moving next_run_ms.
    Returns (job_id, replayed): the same key again (within 48 h) returns the first
    job's id with replayed=True, even after that job finished and was deleted.
    Enqueue errors (Backpressure, Quarantined, EnqueueForbidden …) are recorded as a
    `failed` event and raised."""
    check_text("idempotency_key", idempotency_key, 1, MAX_IDEMPOTENCY_KEY)
    schedule = store.get_schedule(schedule_id)
    if schedule is None:
        raise NotFound("schedule", schedule_id)
    previous = store.find_schedule_run(schedule_id, idempotency_key)
    if previous is not None:
        return previous, True
    tick = store.now_ms()
    env = _envelope(schedule, new_id(), tick,
                    unique_key=run_unique_key(schedule_id, idempotency_key),
                    unique_window_ms=RUN_NOW_REPLAY_MS, unique_exclude_kind=True)
    producer, inserter = _producer(store, client)
    try:
        (job_id,) = producer.enqueue_many(
            [env], context=context or EnqueueContext(source="periodic"))
    except Duplicate as exc:
        job_id = exc.existing_id  # a concurrent call with this key enqueued first
    except Exception as exc:
        outcome, why, existing = _failure(exc)
        store.record_schedule_events(schedule_id, [(tick, existing, outcome, why)])
        raise
    inserted = job_id in inserter.inserted
    outcome = "enqueued" if inserted else "deduplicated"
    winner = store.remember_schedule_run(schedule_id, idempotency_key, job_id,
                                         (tick, job_id, outcome, "run_now"), inserted)
    return winner, not inserted


def _enqueue_retrying(producer: Client, env: Envelope, context: EnqueueContext) -> None:
    """Retry a store-unavailable enqueue twice: on PostgreSQL a twin scheduler inserting
    the same tick concurrently surfaces as a unique violation (store unavailable), and
    the retry then finds the job and reports it as already there."""
    for attempt in range(ENQUEUE_ATTEMPTS):
        try:
            producer.enqueue_many([env], context=context)
            return
        except StoreUnavailable:
            if attempt == ENQUEUE_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def _envelope(schedule: Schedule, job_id: str, tick: int, **unique: Any) -> Envelope:
    return Envelope(
        kind=schedule.kind, payload=schedule.payload, id=job_id,
        queue=schedule.queue, priority=schedule.priority,
        partition_key=schedule.partition_key, rate_class=schedule.rate_class,
        max_attempts=schedule.max_attempts, retention_ms=schedule.retention_ms,
        periodic_schedule_id=schedule.id, periodic_tick_ms=tick, **unique,
    )
