"""PeriodicMethods: the store methods for periodic schedules and for the maintenance
duties that the core adapter does not already have.

A mixin so this surface lives beside, not inside, the core adapter. It needs from the
class it is mixed into: `db` (`write()` yielding `(conn, store_now)`, `read()` yielding
`conn`), `now_ms()`, `_publish(queues)` and `_enqueue(conn, now, envs)` (the engine's
enqueue policy in the current transaction).

Firing schedules is a service (`headgate/services/scheduling.py`: when to fire, `on_missed`,
the producer client's middleware); this mixin gives it the one-transaction steps it is
made of, each a port method: `due_schedules`, `enqueue_tick` (a tick's insert and the
schedule's compare-and-set move past it, together), `record_schedule_events`,
`park_schedule`, and run-now's `find_schedule_run` / `remember_schedule_run`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from headgate.core import Envelope, InvalidInput
from headgate.core.envelope import check_int
from headgate.core.records import PruneReport, Schedule, ScheduleEventEntry
from headgate.store.port import ScheduleEvent, ScheduleStep, TickInsert

from . import periodic
from .enqueue_rows import EnqueueResult
from .queries import load

PRUNE_BATCH = 1000
Q = load(__name__)
EXISTING_IDS = Q["existing_ids"]


class _Moved(Exception):
    """The schedule moved since it was read: raised inside the tick's transaction so
    the insert rolls back."""


class PeriodicMethods:
    """Schedules, their firing and events, run-now, and maintenance writes."""

    if TYPE_CHECKING:  # provided by the concrete store
        db: Any

        def now_ms(self) -> int: ...

        def _publish(self, queues: set[str] | str | None) -> None: ...

        def _enqueue(self, conn: Any, now: int,
                     envs: Sequence[Envelope]) -> EnqueueResult: ...

    # -- schedules ---------------------------------------------------------------------
    def upsert_schedule(self, schedule: Schedule | Mapping[str, Any]) -> Schedule:
        """Create or replace a schedule; returns it as stored. Raises InvalidInput
        naming the first bad field."""
        checked = periodic.validate_schedule(schedule)
        with self.db.write() as (conn, now):
            return periodic.upsert(conn, now, checked)

    def list_schedules(self) -> list[Schedule]:
        with self.db.read() as conn:
            return periodic.list_all(conn)

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        with self.db.read() as conn:
            return periodic.get(conn, schedule_id)

    def delete_schedule(self, schedule_id: str) -> None:
        """NotFound when missing. Enqueue events are kept for the audit."""
        with self.db.write() as (conn, _):
            periodic.delete(conn, schedule_id)

    def list_schedule_events(
        self, schedule_id: str, cursor: int | None = None, limit: int = 30
    ) -> list[ScheduleEventEntry]:
        """Newest first, keyset by event_id: pass the last event_id seen as `cursor`.
        Works for deleted schedules too (their events outlive them)."""
        with self.db.read() as conn:
            return periodic.list_events(conn, schedule_id, cursor, limit)

    # -- firing steps (the firing itself: headgate/services/scheduling.py) ---------------------
    def due_schedules(self, now_ms: int, limit: int) -> list[Schedule]:
        with self.db.read() as conn:
            return periodic.due(conn, now_ms, limit)

    def enqueue_tick(self, envelopes: Sequence[Envelope],
                     step: ScheduleStep | None = None) -> TickInsert:
        envs = [e if e.fingerprint and e.id else e.validated() for e in envelopes]
        ids = [e.id for e in envs]
        try:
            with self.db.write() as (conn, now):
                # No lock before the enqueue: it takes the unique keys' locks, then the
                # queues', the order of every transaction that holds both (a queue lock
                # here first could deadlock with a producer of the same key).
                marks = ", ".join("?" * len(ids))
                before = {r[0] for r in conn.execute(EXISTING_IDS.format(marks=marks), ids)}
                result = self._enqueue(conn, now, envs)
                if step is not None and not periodic.advance(
                    conn, now, {"id": step.schedule_id, "spec": step.spec,
                                "next_run_ms": step.expected},
                    step.to, any(i not in before for i in result.ids),
                ):
                    raise _Moved(step.schedule_id)
        except _Moved:
            return TickInsert(ids=[], moved=True)
        if result.inserted:
            self._publish(result.queues)
        inserted = frozenset(i for i in ids if i not in before)
        if result.duplicate is not None:
            return TickInsert(ids=result.ids, duplicate=result.duplicate)
        return TickInsert(ids=result.ids, inserted=inserted)  # type: ignore[arg-type]

    def record_schedule_events(
        self, schedule_id: str, events: Sequence[ScheduleEvent],
        step: ScheduleStep | None = None, enqueued: bool = False,
    ) -> None:
        with self.db.write() as (conn, now):
            periodic.record_events(conn, now, schedule_id, events)
            if step is not None:
                periodic.advance(conn, now, {"id": schedule_id, "spec": step.spec,
                                             "next_run_ms": step.expected},
                                 step.to, enqueued)

    def park_schedule(self, schedule_id: str, spec: str, next_run_ms: int,
                      events: Sequence[ScheduleEvent]) -> bool:
        row = {"id": schedule_id, "spec": spec, "next_run_ms": next_run_ms}
        with self.db.write() as (conn, now):
            if not periodic.park(conn, now, row):
                return False
            periodic.record_events(conn, now, schedule_id, events)
            return True

    def find_schedule_run(self, schedule_id: str, idempotency_key: str) -> str | None:
        with self.db.read_with_clock() as (conn, now):
            return periodic.find_run(conn, now, schedule_id, idempotency_key)

    def remember_schedule_run(self, schedule_id: str, idempotency_key: str, job_id: str,
                              event: ScheduleEvent, inserted: bool) -> str:
        with self.db.write() as (conn, now):
            winner = periodic.remember_run(conn, now, schedule_id, idempotency_key, job_id)
            periodic.record_events(conn, now, schedule_id, [event])
            if inserted:
                periodic.touch_enqueued(conn, now, schedule_id)
        return winner

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

    def prune(self, older_than_ms: int, dry_run: bool) -> PruneReport:
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
        return PruneReport(dry_run=dry_run, older_than_ms=older_than_ms, cutoff_ms=cutoff,
                           counts=counts, total=sum(counts.values()), deleted=deleted)

