"""SqlStore: one implementation of the store port for every SQL engine.

Each public method is one transaction on `self.db`; the decisions live in the shared
modules beside this one.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from headgate.core import (
    AckRequest,
    Claim,
    Envelope,
    Job,
    JobFilter,
    JobPage,
    Outcome,
)
from headgate.core.adaptive import Adaptive
from headgate.core.envelope import check_int, check_text
from headgate.core.job import Blob, Progress
from headgate.core.records import (
    BucketCounts,
    ConcurrencyLimit,
    DutyHolder,
    ForecastInputs,
    HeartbeatReply,
    HistoryBucket,
    OrphanSweep,
    PartitionState,
    QuarantineEntry,
    QueueStats,
    RateClassChange,
    RateClassState,
    RunningJob,
    UniqueKeyCounts,
    WorkerBeat,
    WorkerRecord,
)
from headgate.core.schema_constants import HISTORY_BUCKET_MS
from headgate.store.port import Store

from . import (
    adaptive,
    buckets,
    control,
    forecast_reads,
    inspection,
    job_pages,
    latency,
    lifecycle,
    uniques,
)
from .api_storage import ApiStorageMixin
from .audit import AuditMethods
from .enqueue_rows import EnqueueResult
from .periodic_methods import PeriodicMethods
from .queries import load
from .rows import bump_history

Q = load(__name__)
RECLAIM_FULL_PASS_MS = 10_000
# How far below the last complete pass's clock the next one starts: a lease set just
# before that pass by a transaction that committed after it.
RECLAIM_MARGIN_MS = 5_000
PING = Q["ping"]
DUTY_HOLDERS = Q["duty_holders"]
REMOVE_WORKER = Q["remove_worker"]


class SqlStore(PeriodicMethods, ApiStorageMixin, AuditMethods, Store):
    """The store port over the shared SQL modules. Subclasses supply `db` (write/read/
    query on their engine), the clock and what only their engine can do."""

    db: Any
    crash_limit: int = 3
    # The reclaimer's watermark: every lease that expired before it was found by a pass
    # that read to the end, so the next passes scan the lease index from there (under a
    # held snapshot its start holds an entry per job claimed since, none of them live).
    # A pass from the start every RECLAIM_FULL_PASS_MS finds anything skipped meanwhile
    # (a row locked at the time, a clock that stepped back).
    _reclaimed_below: int = 0
    _full_reclaim_at: int = 0

    # -- lifecycle ---------------------------------------------------------------------
    def schema_version(self) -> int:
        return self.db.version()

    def ping(self) -> None:
        self.db.query(PING, ("__readyz__",))

    def close(self) -> None:
        self.db.close()

    def _publish(self, queues: set[str] | str | None) -> None:
        if queues:
            self.activity.publish({queues} if isinstance(queues, str) else queues)

    # -- producing ---------------------------------------------------------------------
    def enqueue_many(self, envelopes: Sequence[Envelope]) -> list[str]:
        envs = [e if e.fingerprint and e.id else e.validated() for e in envelopes]
        if not envs:
            return []
        # Shares its commit with other threads' enqueues where the engine groups them.
        result = self.write_combined(lambda conn, now: self._enqueue(conn, now, envs))
        if result.inserted:
            self._publish(result.queues)
        if result.duplicate is not None:
            raise result.duplicate
        return result.ids

    @abstractmethod
    def _enqueue(self, conn: Any, now: int, envs: Sequence[Envelope]) -> EnqueueResult:
        """The enqueue policy in the current write transaction: each engine states its
        own (SQLite's enqueue.py, PostgreSQL's function)."""

    # -- admission and leases ----------------------------------------------------------
    def ack(self, claim: Claim, outcome: Outcome, error: str | None = None,
            delay_ms: int | None = None, result: bytes | None = None, *,
            result_schema_version: int = 1, logs: Sequence[str] = ()) -> None:
        with self.db.write() as (conn, now):
            conn.dialect.lock_queues(conn, [claim.job.queue])
            queue = lifecycle.ack(conn, now, claim, outcome, error, delay_ms, result,
                                  result_schema_version, logs)
            if claim.job.rate_class and Outcome(outcome) is Outcome.SUCCESS:
                adaptive.succeeded(conn, now, (claim.job.rate_class,))
        if Outcome(outcome) in (Outcome.RATE_LIMITED, Outcome.SNOOZE):
            self._publish(queue)

    def ack_many(self, acks: Sequence[AckRequest]) -> list[str]:
        if not acks:
            return []
        with self.db.write() as (conn, now):
            lost, wake = self._apply_acks(conn, now, acks)
        self._publish(wake)
        return lost

    @staticmethod
    def _apply_acks(conn: Any, now: int, acks: Sequence[AckRequest]) -> tuple[list[str], set[str]]:
        history: dict[str, dict[str, int]] = {}
        # Queue locks first, then rows in id order (see lifecycle.lock_job_queues).
        conn.dialect.lock_queues(conn, sorted({a.claim.job.queue for a in acks}))
        lost, wake = lifecycle.ack_many(conn, now, acks, history) if acks else ([], set())
        bump_history(conn, now, history)
        adaptive.succeeded(conn, now, lifecycle.succeeded_classes(acks, lost))
        return lost, wake

    def renew(self, claims: Sequence[Claim], lease_ms: int = 30_000) -> list[Claim]:
        check_int("lease_ms", lease_ms, 1)
        if not claims:
            return []
        with self.db.write() as (conn, now):
            return lifecycle.renew(conn, now, claims, lease_ms)

    def release(self, claims: Sequence[Claim]) -> int:
        if not claims:
            return 0
        with self.db.write() as (conn, now):
            released, queues = lifecycle.release(conn, now, claims)
        self._publish(queues)
        return released

    def report_progress(self, claim: Claim, current: int, total: int,
                        message: str | None = None) -> None:
        with self.db.write() as (conn, now):
            lifecycle.write_progress(conn, now, claim, current, total, message)

    def write_output(self, claim: Claim, data: bytes, schema_version: int = 1) -> None:
        with self.db.write() as (conn, now):
            lifecycle.write_output(conn, now, claim, data, schema_version)

    # -- duties ------------------------------------------------------------------------
    def reclaim_expired(self, limit: int = 1000) -> int:
        check_int("limit", limit, 1)
        with self.db.write() as (conn, now):
            full = not 0 <= now - self._full_reclaim_at < RECLAIM_FULL_PASS_MS
            since = 0 if full else self._reclaimed_below
            count, queues = lifecycle.reclaim_expired(conn, now, limit, self.crash_limit,
                                                      since)
        if count < limit:  # the pass read every expired lease from `since` on
            self._reclaimed_below = now - RECLAIM_MARGIN_MS
            if full:
                self._full_reclaim_at = now
        self._publish(queues)
        return count

    def promote_due(self, limit: int = 1000) -> int:
        check_int("limit", limit, 1)
        with self.db.write() as (conn, now):
            count, queues = lifecycle.promote_due(conn, now, limit)
        self._publish(queues)
        return count

    def evict_retained(self, limit: int = 1000) -> int:
        check_int("limit", limit, 1)
        with self.db.write() as (conn, now):
            return lifecycle.evict_retained(conn, now, limit)

    def prune_uniques(self, limit: int = 1000) -> int:
        check_int("limit", limit, 1)
        with self.db.write() as (conn, now):
            return uniques.prune_expired(conn, now, limit)

    def prune_orphan_uniques(self, limit: int = 1000) -> int:
        check_int("limit", limit, 1)
        with self.db.write() as (conn, now):
            return uniques.sweep_orphans(conn, now, limit)

    def unique_key_counts(self) -> UniqueKeyCounts:
        with self.db.read_with_clock() as (conn, now):
            return UniqueKeyCounts(**uniques.counts(conn, now),
                                   orphans=OrphanSweep(**uniques.orphan_sweep_state(conn)))

    def prune_history(self, older_than_ms: int, limit: int = 1000) -> int:
        check_int("older_than_ms", older_than_ms, 0)
        check_int("limit", limit, 1)
        with self.db.write() as (conn, now):
            return buckets.prune_older(conn, now - older_than_ms, limit)

    def history_bucket_counts(self, older_than_ms: int) -> dict[str, BucketCounts]:
        check_int("older_than_ms", older_than_ms, 0)
        with self.db.read_with_clock() as (conn, now):
            return {table: BucketCounts(**row)
                    for table, row in buckets.counts(conn, now - older_than_ms).items()}

    def latency_histograms(self, since_ms: int) -> list[tuple[str, int, str, int, int, int]]:
        with self.db.read() as conn:
            return latency.rows_since(conn, since_ms)

    def forecast_inputs(self, job_ids: Sequence[str] = (),
                        queues: Sequence[str] = ()) -> ForecastInputs:
        with self.db.read() as conn:
            return forecast_reads.forecast_inputs(conn, list(job_ids), list(queues))

    def latency_totals(self, since_ms: int, queue: str | None = None,
                       kind: str | None = None) -> list[tuple[str, str, str, int, int, int]]:
        with self.db.read() as conn:
            return latency.totals_since(conn, since_ms, queue, kind)

    def running_jobs(self, limit: int = 1000) -> list[RunningJob]:
        check_int("limit", limit, 1)
        with self.db.read() as conn:
            return inspection.running_jobs(conn, limit)

    def claim_duty(self, name: str, holder: str, ttl_ms: int) -> bool:
        with self.db.write() as (conn, now):
            return control.claim_duty(conn, now, name, holder, ttl_ms)

    def renew_duty(self, name: str, holder: str, ttl_ms: int) -> bool:
        with self.db.write() as (conn, now):
            return control.renew_duty(conn, now, name, holder, ttl_ms)

    def release_duty(self, name: str, holder: str) -> None:
        with self.db.write() as (conn, _):
            control.release_duty(conn, name, holder)

    def duty_holders(self) -> list[DutyHolder]:
        return [DutyHolder(n, h, e)
                for n, h, e in self.db.query(DUTY_HOLDERS)]

    # -- workers -----------------------------------------------------------------------
    def heartbeat(self, worker: WorkerBeat, running: Sequence[Claim] = ()) -> HeartbeatReply:
        with self.db.write() as (conn, now):
            return control.heartbeat(conn, now, worker, running)

    def signal_worker(self, worker_id: str, command: str | None) -> None:
        with self.db.write() as (conn, _):
            control.signal_worker(conn, worker_id, command)

    def list_workers(self, within_ms: int) -> list[WorkerRecord]:
        with self.db.read_with_clock() as (conn, now):
            return inspection.list_workers(conn, now, within_ms)

    def remove_worker(self, worker_id: str) -> None:
        with self.db.write() as (conn, _):
            conn.execute(REMOVE_WORKER, (worker_id,))

    # -- operator control --------------------------------------------------------------
    def operator_retry(self, job_id: str) -> None:
        with self.db.write() as (conn, now):
            queue = control.operator_retry(conn, now, job_id)
        self._publish(queue)

    def operator_cancel(self, job_id: str) -> None:
        with self.db.write() as (conn, now):
            queue = control.operator_cancel(conn, now, job_id)
        self._publish(queue)

    def delete_job(self, job_id: str) -> None:
        with self.db.write() as (conn, _):
            queue = control.delete_job(conn, job_id)
        self._publish(queue)

    def promote_job(self, job_id: str) -> None:
        with self.db.write() as (conn, now):
            queue = control.promote_job(conn, now, job_id)
        self._publish(queue)

    def reschedule_job(self, job_id: str, scheduled_at_ms: int) -> None:
        with self.db.write() as (conn, now):
            queue = control.reschedule_job(conn, now, job_id, scheduled_at_ms)
        self._publish(queue)

    def edit_payload(self, job_id: str, payload: bytes, schema_version: int,
                     fingerprint: str) -> None:
        with self.db.write() as (conn, _):
            queue = control.edit_payload(conn, job_id, payload, schema_version, fingerprint)
        self._publish(queue)

    def quarantine_list(self) -> list[QuarantineEntry]:
        with self.db.read() as conn:
            return inspection.quarantine_list(conn)

    def quarantine_release(self, fingerprint: str) -> int:
        with self.db.write() as (conn, now):
            released, queues = control.quarantine_release(conn, now, fingerprint)
        self._publish(queues)
        return released

    def set_queue_paused(self, queue: str, paused: bool) -> None:
        with self.db.write() as (conn, now):
            control.set_queue(conn, now, queue, "paused", int(bool(paused)))
        self._publish(queue)

    def set_queue_weight(self, queue: str, weight: int) -> None:
        check_int("weight", weight, 1)
        with self.db.write() as (conn, now):
            control.set_queue(conn, now, queue, "weight", weight)
        self._publish(queue)

    def set_enqueue_limit(self, queue: str, limit: int | None) -> None:
        if limit is not None:
            check_int("max_unfinished_jobs", limit, 0)
        with self.db.write() as (conn, now):
            control.set_queue(conn, now, queue, "max_unfinished_jobs", limit)
        self._publish(queue)

    def upsert_rate_class(self, name: str, limit: int, window_ms: int,
                          burst: int | None = None, paused: bool = False,
                          adaptive: Adaptive | None = None) -> None:
        with self.db.write() as (conn, now):
            control.upsert_rate_class(conn, now, name, limit, window_ms, burst, paused,
                                      adaptive)
        self.activity.publish(())

    def rate_classes(self) -> list[RateClassState]:
        with self.db.read_with_clock() as (conn, now):
            return inspection.rate_classes(conn, now)

    def rate_class_history(self, name: str, since_ms: int,
                           limit: int = 1000) -> list[RateClassChange]:
        check_int("limit", limit, 1, 10_000)
        with self.db.read() as conn:
            return adaptive.history(conn, name, since_ms, limit)

    def upsert_concurrency_limit(self, name: str, queue: str, max_concurrent: int,
                                 on_saturated: str = "queue") -> None:
        with self.db.write() as (conn, now):
            control.upsert_concurrency_limit(conn, now, name, queue, max_concurrent,
                                             on_saturated)
        self._publish(queue)

    def delete_rate_class(self, name: str, force: bool = False) -> int:
        with self.db.write() as (conn, _now):
            waiting = control.delete_rate_class(conn, name, force)
        self.activity.publish(())
        return waiting

    def delete_concurrency_limit(self, name: str, force: bool = False) -> int:
        with self.db.write() as (conn, _now):
            governed, queue = control.delete_concurrency_limit(conn, name, force)
        self._publish(queue)
        return governed

    def concurrency_limits(self) -> list[ConcurrencyLimit]:
        with self.db.read() as conn:
            return inspection.concurrency_limits(conn)

    # -- inspection --------------------------------------------------------------------
    def get_job(self, job_id: str, include_payload: bool = False) -> Job | None:
        with self.db.read() as conn:
            return inspection.get_job(conn, job_id, include_payload)

    def get_result(self, job_id: str) -> Blob | None:
        with self.db.read() as conn:
            return inspection.get_result(conn, job_id)

    def get_output(self, job_id: str) -> Blob | None:
        with self.db.read() as conn:
            return inspection.get_output(conn, job_id)

    def get_progress(self, job_id: str) -> Progress | None:
        with self.db.read() as conn:
            return inspection.get_progress(conn, job_id)

    def list_jobs(self, filter: JobFilter, cursor: str | None = None, limit: int = 50,
                  include_payload: bool = False) -> JobPage:
        with self.db.read_with_clock() as (conn, now):
            return job_pages.list_jobs(conn, now, filter, cursor, limit,
                                       include_payload)

    def counts(self, queue: str | None = None) -> dict[str, int]:
        with self.db.read() as conn:
            return inspection.counts(conn, queue)

    def queue_stats(self) -> list[QueueStats]:
        with self.db.read_with_clock() as (conn, now):
            return inspection.queue_stats(conn, now)

    def partitions(self, queue: str) -> list[PartitionState]:
        check_text("queue", queue)
        with self.db.read() as conn:
            return inspection.partitions(conn, queue)

    def history(
        self, queue: str, since_ms: int, bucket_ms: int = HISTORY_BUCKET_MS
    ) -> list[HistoryBucket]:
        with self.db.read() as conn:
            return inspection.history(conn, queue, since_ms, bucket_ms)

    def history_counters(self, since_ms: int) -> dict[str, dict[int, tuple[int, ...]]]:
        with self.db.read() as conn:
            return inspection.history_counters(conn, since_ms)
