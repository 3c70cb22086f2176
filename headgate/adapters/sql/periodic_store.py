"""PeriodicMixin: the store methods for periodic schedules (SPEC §9) and for the
maintenance duties of SPEC §6 that the core adapter does not already have.

A mixin so this surface lives beside, not inside, the core adapter. It needs from the
class it is mixed into: `db` (`write()` yielding `(conn, store_now)`, `read()` yielding
`conn`), `now_ms()` and `_publish(queues)`.

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

`on_missed` (decided here; SPEC §9 only says skip and run_once enqueue at most the
latest due tick):
- `skip`: on time — the oldest unfired tick is at most `misfire_grace_ms` old — the
  latest due tick is enqueued (earlier ones a slow scheduler tick ran past are
  dropped). Late — the scheduler was down or stalled for longer than the grace — no job
  is enqueued: one `skipped` event (reason `missed`) is recorded for the latest due tick
  and the schedule waits for its next tick. "Skip" means a missed run stays missed.
- `run_once`: the latest due tick is always enqueued, however late: a missed run
  happens once on recovery, never once per missed tick.
- `backfill`: the most recent `max(backfill_limit, 1)` due ticks are enqueued, oldest
  first, however late (`backfill_limit` 0 therefore behaves as run_once).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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

from . import enqueue, periodic

if TYPE_CHECKING:
    from headgate.client import Client, EnqueueContext

log = logging.getLogger("headgate.periodic")

DEFAULT_MISFIRE_GRACE_MS = 60_000
DEFAULT_FIRE_LIMIT = 100
PRUNE_BATCH = 1000
MAX_IDEMPOTENCY_KEY = 255
ENQUEUE_ATTEMPTS = 3

Event = tuple[int, str | None, str, str]  # tick_ms, job_id, outcome, reason


def tick_job_id(schedule_id: str, tick_ms: int) -> str:
    """The one job id a (schedule, tick) can ever have."""
    return f"periodic:{schedule_id}:{tick_ms}"


def run_job_id(schedule_id: str, idempotency_key: str) -> str:
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:24]
    return f"periodic:{schedule_id}:run:{digest}"


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
    """The schedule row a tick's insert moves on: from `expected` to `to`, or not at all
    (then the insert rolls back and `superseded` is set)."""

    schedule_id: str
    spec: str
    expected: int
    to: int
    committed: bool = False
    superseded: bool = False


class _Superseded(Exception):
    """The schedule moved since it was read: another scheduler fired it, or it was
    edited. Raised inside the tick's transaction so the insert rolls back."""


class _TickInserter:
    """Stands in for the store inside a copy of the caller's Client, so the firing loop
    learns whether the tick's job was inserted now or already existed — the difference
    between an `enqueued` and a `deduplicated` event — from the same transaction, in
    which it also advances the schedule (`advance`, once per tick)."""

    def __init__(self, store: PeriodicMixin) -> None:
        self.store = store
        self.inserted: set[str] = set()
        self.advance: _Advance | None = None

    def enqueue_many(self, envelopes: Sequence[Envelope]) -> list[str]:
        envs = [e if e.fingerprint and e.id else e.validated() for e in envelopes]
        ids = [e.id for e in envs]
        step = self.advance  # kept until it commits, for _enqueue_retrying's retries
        with self.store.db.write() as (conn, now):
            # Queue locks first, the order every job-state transaction takes them in
            # (else a tick's insert and a worker's ack+admit can deadlock on PostgreSQL).
            conn.dialect.lock_queues(conn, {e.queue for e in envs})
            marks = ", ".join("?" * len(ids))
            before = {r[0] for r in conn.execute(
                f"SELECT id FROM jobs WHERE id IN ({marks})", ids)}
            result = enqueue.enqueue(conn, now, envs)
            if step is not None and not periodic.advance(
                conn, now, {"id": step.schedule_id, "spec": step.spec,
                            "next_run_ms": step.expected},
                step.to, any(i not in before for i in result.ids),
            ):
                step.superseded = True
                raise _Superseded(step.schedule_id)
        if step is not None:
            step.committed, self.advance = True, None
        if result.inserted:
            self.store._publish(result.queues)
        if result.duplicate is not None:
            raise result.duplicate
        self.inserted.update(i for i in ids if i not in before)  # type: ignore[misc]
        return result.ids


class PeriodicMixin:
    """Schedules, their firing and events, run-now, and maintenance writes."""

    if TYPE_CHECKING:  # provided by the concrete store
        db: Any

        def now_ms(self) -> int: ...

        def _publish(self, queues: set[str] | str | None) -> None: ...

    # -- schedules ---------------------------------------------------------------------
    def upsert_schedule(self, schedule: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace a schedule; returns the stored row (wire names, payload as
        bytes). Raises InvalidInput naming the first bad field."""
        checked = periodic.validate_schedule(schedule)
        with self.db.write() as (conn, now):
            return periodic.upsert(conn, now, checked)

    def list_schedules(self) -> list[dict[str, Any]]:
        with self.db.read() as conn:
            return periodic.list_all(conn)

    def get_schedule(self, schedule_id: str) -> dict[str, Any] | None:
        with self.db.read() as conn:
            return periodic.get(conn, schedule_id)

    def delete_schedule(self, schedule_id: str) -> None:
        """NotFound when missing. Enqueue events are kept for the audit."""
        with self.db.write() as (conn, _):
            periodic.delete(conn, schedule_id)

    def list_schedule_events(
        self, schedule_id: str, cursor: int | None = None, limit: int = 30
    ) -> list[dict[str, Any]]:
        """Newest first, keyset by event_id: pass the last event_id seen as `cursor`.
        Works for deleted schedules too (their events outlive them)."""
        with self.db.read() as conn:
            return periodic.list_events(conn, schedule_id, cursor, limit)

    # -- firing ------------------------------------------------------------------------
    def fire_due_schedules(
        self, now_ms: int | None = None, limit: int = DEFAULT_FIRE_LIMIT, *,
        client: Client | None = None, misfire_grace_ms: int = DEFAULT_MISFIRE_GRACE_MS,
        still_held: Callable[[], bool] | None = None,
    ) -> int:
        """The scheduler duty's tick: fire every unpaused schedule whose next_run_ms has
        come (at most `limit` schedules, most overdue first). Returns the number of jobs
        enqueued. `now_ms` evaluates due-ness as of an earlier instant (never later than
        the store clock: a tick must not fire before it is due). `still_held` returning
        False stops the run before the next schedule or tick: the caller's duty lease
        lapsed and another scheduler may be firing the same schedules."""
        check_int("limit", limit, 1)
        check_int("misfire_grace_ms", misfire_grace_ms, 0)
        store_now = self.now_ms()
        if now_ms is None:
            now_ms = store_now
        elif check_int("now_ms", now_ms, 0) > store_now:
            raise InvalidInput("now_ms must not be later than the store clock")
        with self.db.read() as conn:
            schedules = periodic.due(conn, now_ms, limit)
        producer, inserter = self._producer(client)
        held = still_held or (lambda: True)
        enqueued = 0
        for schedule in schedules:
            if not held():
                log.warning("scheduler lost its duty lease: stopping this run")
                break
            try:
                enqueued += self._fire(schedule, now_ms, producer, inserter,
                                       misfire_grace_ms, held)
            except Exception:  # noqa: BLE001 - one bad schedule must not starve the rest
                log.exception("periodic schedule %s failed to fire", schedule["id"])
        return enqueued

    def _producer(self, client: Client | None) -> tuple[Client, _TickInserter]:
        from headgate.client import Client  # services layer; imported late on purpose

        inserter = _TickInserter(self)
        producer = copy.copy(client) if client is not None else Client(self)  # type: ignore[arg-type]
        producer.store = inserter  # type: ignore[assignment]
        return producer, inserter

    def _plan(self, schedule: Mapping[str, Any], now: int,
              grace_ms: int) -> tuple[list[tuple[int, str]], list[Event]]:
        """Which ticks to enqueue (with their event reason), and skip events."""
        spec, next_run = schedule["spec"], schedule["next_run_ms"]
        latest = schedule_spec.ticks_between(spec, next_run - 1, now, 1)
        if not latest:
            return [], []
        tick = latest[0]
        policy = schedule["on_missed"]
        if policy == "backfill":
            ticks = schedule_spec.ticks_between(
                spec, next_run - 1, now, max(1, schedule["backfill_limit"]))
            return [(t, "scheduled" if t == tick else "backfill") for t in ticks], []
        if policy == "skip" and now - next_run > grace_ms:
            return [], [(tick, None, "skipped", "missed")]
        return [(tick, "scheduled")], []

    def _fire(self, schedule: Mapping[str, Any], now: int, producer: Client,
              inserter: _TickInserter, grace_ms: int, held: Callable[[], bool]) -> int:
        from headgate.client import EnqueueContext

        try:
            next_run = schedule_spec.next_after(schedule["spec"], now)
            plan, events = self._plan(schedule, now, grace_ms)
        except InvalidInput as exc:
            self._park(schedule, exc)
            return 0
        context = EnqueueContext(source="periodic")
        enqueued = 0
        expected = schedule["next_run_ms"]
        stopped = False
        # Backfill ticks are consecutive, so each one's successor is the next in the plan.
        successors = [t for t, _ in plan[1:]] + [next_run] if plan else []
        for (tick, reason), successor in zip(plan, successors, strict=True):
            if not held():
                stopped = True
                break
            job_id = tick_job_id(schedule["id"], tick)
            step = _Advance(schedule["id"], schedule["spec"], expected, successor)
            inserter.advance = step
            try:
                _enqueue_retrying(producer, _envelope(schedule, job_id, tick), context)
            except Exception as exc:  # noqa: BLE001 - recorded as the tick's outcome
                if step.superseded:
                    stopped = True
                    break
                if step.committed:  # e.g. a unique-key duplicate: the tick is done
                    expected = successor
                outcome, why, existing = _failure(exc)
                if why == "error":
                    log.exception("periodic schedule %s tick %s", schedule["id"], tick)
                events.append((tick, existing, outcome, why))
                continue
            finally:
                inserter.advance = None
            if step.superseded:  # a middleware swallowed the stop
                stopped = True
                break
            if step.committed:
                expected = successor
            if job_id in inserter.inserted:
                enqueued += 1
                events.append((tick, job_id, "enqueued", reason))
            else:
                events.append((tick, job_id, "deduplicated", "exists"))
        with self.db.write() as (conn, wnow):
            periodic.record_events(conn, wnow, schedule["id"], sorted(events))
            if not stopped:
                periodic.advance(conn, wnow, {**schedule, "next_run_ms": expected},
                                 next_run, enqueued > 0)
        return enqueued

    def _park(self, schedule: Mapping[str, Any], exc: InvalidInput) -> None:
        """Pause a schedule that has no next tick: left due, it would be fired (and
        fail) on every scheduler tick."""
        log.warning("periodic schedule %s paused: %s", schedule["id"], exc)
        with self.db.write() as (conn, wnow):
            if periodic.park(conn, wnow, schedule):
                periodic.record_events(conn, wnow, schedule["id"], [
                    (schedule["next_run_ms"], None, "failed", "no_next_tick")])

    def run_schedule_now(
        self, schedule_id: str, idempotency_key: str, *, client: Client | None = None,
        context: EnqueueContext | None = None,
    ) -> tuple[str, bool]:
        """Enqueue one extra job from the schedule now, without moving next_run_ms.
        Returns (job_id, replayed): the same key again (within 48 h) returns the first
        job's id with replayed=True, even after that job finished and was deleted.
        Enqueue errors (Backpressure, Quarantined, EnqueueForbidden …) are recorded as a
        `failed` event and raised."""
        from headgate.client import EnqueueContext

        check_text("idempotency_key", idempotency_key, 1, MAX_IDEMPOTENCY_KEY)
        with self.db.read() as conn:
            schedule = periodic.get(conn, schedule_id)
            if schedule is None:
                raise NotFound("schedule", schedule_id)
            previous = periodic.find_run(conn, self.now_ms(), schedule_id, idempotency_key)
        if previous is not None:
            return previous, True
        job_id = run_job_id(schedule_id, idempotency_key)
        tick = self.now_ms()
        producer, inserter = self._producer(client)
        try:
            producer.enqueue_many([_envelope(schedule, job_id, tick)],
                                  context=context or EnqueueContext(source="periodic"))
        except IdConflict:
            pass  # this key's job exists from before an edit of the schedule: a replay
        except Exception as exc:
            outcome, why, existing = _failure(exc)
            with self.db.write() as (conn, wnow):
                periodic.record_events(conn, wnow, schedule_id, [(tick, existing, outcome, why)])
            raise
        inserted = job_id in inserter.inserted
        with self.db.write() as (conn, wnow):
            winner = periodic.remember_run(conn, wnow, schedule_id, idempotency_key, job_id)
            outcome = "enqueued" if inserted else "deduplicated"
            periodic.record_events(conn, wnow, schedule_id, [(tick, job_id, outcome, "run_now")])
            if inserted:
                periodic.touch_enqueued(conn, wnow, schedule_id)
        return winner, not inserted

    # -- maintenance -------------------------------------------------------------------
    def forget_workers(self, older_than_ms: int) -> int:
        """Delete registry rows whose last heartbeat is older than the bound."""
        check_int("older_than_ms", older_than_ms, 1)
        with self.db.write() as (conn, now):
            return periodic.forget_workers(conn, now, older_than_ms)

    def record_queue_depths(self) -> int:
        """Write each queue's unfinished count into its current minute history bucket,
        from the maintained counters (no job scan). Returns the number of queues."""
        with self.db.write() as (conn, now):
            return periodic.record_queue_depths(conn, now)

    def prune(self, older_than_ms: int, dry_run: bool) -> dict[str, Any]:
        """Terminal, non-quarantined jobs finalized before now - older_than_ms: counted
        by state, and (unless dry_run) deleted in bounded batches, each its own
        transaction so producers and workers interleave."""
        check_int("older_than_ms", older_than_ms, 0)
        if not isinstance(dry_run, bool):
            raise InvalidInput("dry_run must be a boolean")
        cutoff = self.now_ms() - older_than_ms
        with self.db.read() as conn:
            counts = periodic.prunable_counts(conn, cutoff)
        deleted = 0
        while not dry_run:
            with self.db.write() as (conn, _):
                n, queues = periodic.prune_batch(conn, cutoff, PRUNE_BATCH)
            self._publish(queues)
            deleted += n
            if n < PRUNE_BATCH:
                break
        return {
            "dry_run": dry_run, "older_than_ms": older_than_ms, "cutoff_ms": cutoff,
            "counts": counts, "total": sum(counts.values()), "deleted": deleted,
        }


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


def _envelope(schedule: Mapping[str, Any], job_id: str, tick: int) -> Envelope:
    return Envelope(
        kind=schedule["kind"], payload=schedule["payload"], id=job_id,
        queue=schedule["queue"], priority=schedule["priority"],
        partition_key=schedule["partition_key"], rate_class=schedule["rate_class"],
        max_attempts=schedule["max_attempts"], retention_ms=schedule["retention_ms"],
        periodic_schedule_id=schedule["id"], periodic_tick_ms=tick,
    )
