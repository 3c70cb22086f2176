"""The store port: the one coarse interface every adapter implements, in roles.

Coarse on purpose: each method is one transaction in the adapter, so policy decisions
(admission, uniqueness, backpressure, fencing) happen where the data is locked, never
in the caller. The methods are grouped by who calls them (`Producer`, `Admission`,
`Maintenance`, `Inspection`, `Control`, each with the `StoreBasics`); `Store` is all of
them, the one class an adapter implements, and a caller types its store as the
narrowest role it uses. What an adapter offers beyond the port it says in
`capabilities()` (store/capabilities.py), never by a method a caller must probe for.
What a method returns is a typed record (core/job.py, core/records/), never a dict
shaped like an HTTP body: the web layer maps records to JSON, so the wire format can
change without the port, and an adapter cannot drift from it unseen.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from headgate.core import (
    AckRequest,
    Claim,
    Duplicate,
    Envelope,
    Explanation,
    InvalidInput,
    Job,
    JobFilter,
    JobPage,
    Outcome,
)
from headgate.core.adaptive import Adaptive
from headgate.core.job import Blob, Progress
from headgate.core.records import (
    AuditEntry,
    BucketCounts,
    ConcurrencyLimit,
    DutyHolder,
    ForecastInputs,
    HeartbeatReply,
    HistoryBucket,
    IdempotencyRecord,
    Operation,
    PartitionState,
    PruneReport,
    QuarantineEntry,
    QueueExtras,
    QueueStats,
    RateClassChange,
    RateClassState,
    RunningJob,
    Schedule,
    ScheduleEventEntry,
    TransactionHorizon,
    UniqueKeyCounts,
    WorkerBeat,
    WorkerRecord,
)

from .activity import ActivityHub
from .capabilities import Capabilities

# One enqueue event of a schedule: (tick_ms, job_id, outcome, reason).
ScheduleEvent = tuple[int, str | None, str, str]


@dataclass(frozen=True, slots=True)
class ScheduleStep:
    """Move schedule `schedule_id` on from next_run_ms `expected` to `to`, by
    compare-and-set on (spec, next_run_ms): a twin scheduler that fired it meanwhile,
    or an edit that re-anchored it, makes the step fail instead of firing twice."""

    schedule_id: str
    spec: str
    expected: int
    to: int


@dataclass(frozen=True, slots=True)
class TickInsert:
    """What `enqueue_tick` did in its one transaction. `inserted` holds the ids that
    are new (the rest already existed: a `deduplicated` tick, not an `enqueued` one);
    `duplicate` is a unique-key holder, committed together with the step; `moved`
    means the step's compare-and-set failed and nothing was written."""

    ids: list[str]
    inserted: frozenset[str] = frozenset()
    duplicate: Duplicate | None = None
    moved: bool = False


# A response as a replay gives it back: status, the headers that carry meaning, body.
Answer = tuple[int, dict[str, str], bytes]


@dataclass(frozen=True, slots=True)
class KeyedEnqueue:
    """What `enqueue_keyed` did. `record`: the key already has one (answer from it;
    nothing was enqueued). Otherwise `ids` (the job, with its answer stored) or
    `duplicate` (the envelope's unique key is held; a holder's replacement is
    committed, and an answer only if `duplicate_answer` gave one)."""

    record: IdempotencyRecord | None = None
    ids: list[str] = field(default_factory=list)
    duplicate: Duplicate | None = None


@dataclass
class IdempotentWrite:
    """A mutating request's Idempotency-Key and its action in one transaction
    (Store.idempotent_write). `record` is the key's existing record (replay it, answer
    422 or 409; nothing was claimed); None means the caller owns the key: it runs its
    action with `conn` as a producer Client's conn= and stores its 2xx answer with
    `respond`, and both commit together or not at all. `queues` is where the caller says
    which queues it enqueued into, for the in-process wake-up after the commit."""

    record: IdempotencyRecord | None
    conn: Any = None
    queues: set[str] = field(default_factory=set)
    response: tuple[int, dict[str, str], bytes] | None = None
    # Writes the answer in the adapter's transaction (status 0: deletes the key's row).
    _store: Callable[[int, dict[str, str], bytes], None] | None = None

    def respond(self, status: int, headers: dict[str, str], body: bytes) -> None:
        """The answer a retry with this key replays (call again to replace it)."""
        self.response = (status, headers, body)
        if self._store is not None:
            self._store(status, headers, body)

    def forget(self) -> None:
        """Store no answer after all (the action failed but its writes still commit):
        a retry with this key runs again."""
        self.response = None
        if self._store is not None:
            self._store(0, {}, b"")


class StoreBasics(Protocol):
    """What every role has: which engine, its clock, what it offers beyond the port
    (`capabilities`), its activity signal and its lifecycle."""

    backend: str
    activity: ActivityHub
    # Lease expiries after which a job is quarantined as a crash loop.
    crash_limit: int

    @abstractmethod
    def schema_version(self) -> int: ...

    @abstractmethod
    def capabilities(self) -> Capabilities: ...

    def change_token(self) -> object:
        """A value that moves whenever any process may have committed, read without a
        lock, where `capabilities().change_token`; this default has none (None)."""
        return None

    def store_url(self) -> str | None:
        """The URL that opens this store's database again (None: an adapter that
        cannot say), to tell whether two stores are one database."""
        return None

    @abstractmethod
    def now_ms(self) -> int:
        """The store's clock, for callers that must agree with it (e.g. explain)."""

    @abstractmethod
    def ping(self) -> None:
        """One index lookup; raises StoreUnavailable when the store cannot answer."""

    @abstractmethod
    def close(self) -> None: ...

    def transaction_horizon(self) -> TransactionHorizon:
        """What holds the store's cleanup back, for monitoring (core/records/upkeep.py); this
        default knows nothing but the engine."""
        return TransactionHorizon(self.backend)


class Producer(StoreBasics, Protocol):
    """Putting jobs in: what `Client` needs."""

    @abstractmethod
    def enqueue_many(self, envelopes: Sequence[Envelope]) -> list[str]:
        """All-or-nothing insert of validated envelopes; returns ids in order.

        Raises Duplicate, IdConflict, Quarantined, Backpressure, InvalidInput."""

    async def enqueue_many_async(self, envelopes: Sequence[Envelope], *,
                                 conn: Any = None) -> list[str]:
        """enqueue_many for asyncio code. This default runs it in a thread (SQLite's
        way: its writes are local and short); an adapter with an async driver
        overrides it, and only such an adapter takes ``conn`` (its async connection,
        for an enqueue inside the caller's transaction)."""
        if conn is not None:
            raise InvalidInput(f"conn= is not supported on the {self.backend} store")
        return await asyncio.to_thread(self.enqueue_many, envelopes)

    def enqueue_many_in(self, conn: Any, envelopes: Sequence[Envelope]) -> list[str]:
        """enqueue_many inside `conn`'s open transaction, committed with it or not at
        all: the caller's driver connection where `capabilities().transactional`, the
        store's own write transaction (idempotent_write's `conn`) where
        `capabilities().enqueue_many_in`. This default takes neither."""
        raise InvalidInput(f"conn= is not supported on the {self.backend} store")


class Admission(StoreBasics, Protocol):
    """Taking jobs out and finishing them: what a worker needs (claims, acks,
    leases, heartbeats)."""

    @abstractmethod
    def admit(
        self,
        worker_id: str,
        queues: Sequence[str],
        capacity: int,
        lease_ms: int = 30_000,
        quantum: int | None = None,
    ) -> list[Claim]: ...

    @abstractmethod
    def ack(
        self,
        claim: Claim,
        outcome: Outcome,
        error: str | None = None,
        delay_ms: int | None = None,
        result: bytes | None = None,
        *,
        result_schema_version: int = 1,
        logs: Sequence[str] = (),
    ) -> None:
        """Apply the transition table to a finished attempt; LeaseLost if superseded."""

    @abstractmethod
    def ack_many(self, acks: Sequence[AckRequest]) -> list[str]:
        """Apply many finished attempts in one transaction; returns the ids whose lease
        was lost (those are skipped, the rest still apply)."""

    @abstractmethod
    def ack_and_admit(
        self, acks: Sequence[AckRequest], worker_id: str, queues: Sequence[str],
        capacity: int, lease_ms: int = 30_000, quantum: int | None = None,
    ) -> tuple[list[str], list[Claim]]:
        """ack_many, then admit, in one transaction: (lost ids, new claims). An engine
        may commit the acks first when one transaction would take row locks out of its
        order (PostgreSQL, acks that write rate-class rows); then an outage after the
        acks' commit admits nothing rather than report committed acks as failed."""

    @abstractmethod
    def renew(self, claims: Sequence[Claim], lease_ms: int = 30_000) -> list[Claim]:
        """Extend leases; returns the claims whose lease was lost (claims, not job ids:
        a worker may briefly hold a stale attempt and a new one of the same job)."""

    @abstractmethod
    def release(self, claims: Sequence[Claim]) -> int:
        """Give unfinished claims back to available without charging an attempt."""

    @abstractmethod
    def report_progress(
        self, claim: Claim, current: int, total: int, message: str | None = None
    ) -> None: ...

    @abstractmethod
    def write_output(self, claim: Claim, data: bytes, schema_version: int = 1) -> None: ...

    @abstractmethod
    def heartbeat(self, worker: WorkerBeat, running: Sequence[Claim] = ()) -> HeartbeatReply:
        """Upsert the registry row; the reply names a pending operator signal (delivered
        once) and which of the `running` claims are no longer theirs to run (an
        operator cancelled the job, or it moved on to another attempt)."""


class Maintenance(StoreBasics, Protocol):
    """The duties' steps: reclaiming, promoting, retention, schedules, bulk
    operations, each one bounded transaction."""

    @abstractmethod
    def reclaim_expired(self, limit: int = 1000) -> int: ...

    @abstractmethod
    def promote_due(self, limit: int = 1000) -> int: ...

    @abstractmethod
    def evict_retained(self, limit: int = 1000) -> int: ...

    @abstractmethod
    def prune_uniques(self, limit: int = 1000) -> int:
        """Delete at most `limit` unique keys whose window has passed (the oldest first);
        lifecycle keys are kept. Returns how many went."""

    @abstractmethod
    def prune_orphan_uniques(self, limit: int = 1000) -> int:
        """Examine the next `limit` unique keys of a sweep that continues where the last
        call stopped, deleting lifecycle keys whose job no longer exists. Returns how
        many keys were examined (fewer than `limit`: the sweep finished a pass)."""

    @abstractmethod
    def settle_partitions(self, limit: int = 1000) -> int:
        """Tidy at most `limit` partitions whose jobs no longer wait; returns how many.
        PostgreSQL clears their waiting flag, which it keeps apart from the count so the
        count's updates are HOT (its counter roll leaves idle rows behind). SQLite, whose
        index reads the count, deletes the rows of partitions with nothing waiting or
        running and no credit: a partition's next job adds its row again."""

    @abstractmethod
    def roll_counters(self, wait_ms: int = 100) -> bool:
        """Start a new generation of the counter rows, where the engine keys them by one
        (PostgreSQL: a lookup then walks only the row versions of one generation, however
        long a snapshot is held; SQLite keeps no versions and returns False). Waits at
        most `wait_ms` for the transactions still writing counts, giving up (False)
        rather than holding writers longer. True when a generation began."""

    @abstractmethod
    def prune_history(self, older_than_ms: int, limit: int = 1000) -> int:
        """Delete at most `limit` history and latency buckets that began more than
        `older_than_ms` ago (the oldest first). Returns how many went."""

    @abstractmethod
    def claim_duty(self, name: str, holder: str, ttl_ms: int) -> bool: ...

    @abstractmethod
    def renew_duty(self, name: str, holder: str, ttl_ms: int) -> bool:
        """Extend a duty lease `holder` still holds, unexpired; False otherwise. Unlike
        claim_duty it never takes a lapsed lease back: another holder may have run the
        duty in between, so a run that outlived its lease must stop, not carry on."""

    @abstractmethod
    def release_duty(self, name: str, holder: str) -> None: ...

    # Firing (headgate/services/scheduling.py, a service) is several transactions per schedule;
    # these are its steps, each one transaction.
    @abstractmethod
    def due_schedules(self, now_ms: int, limit: int) -> list[Schedule]:
        """Unpaused schedules with next_run_ms <= now_ms, most overdue first."""

    @abstractmethod
    def enqueue_tick(self, envelopes: Sequence[Envelope],
                     step: ScheduleStep | None = None) -> TickInsert:
        """enqueue_many (same checks and errors, except a unique-key Duplicate, which is
        answered in `duplicate`) and, given `step`, the schedule's move past the tick,
        in one transaction: a tick is enqueued at most once whoever fires it."""

    @abstractmethod
    def record_schedule_events(
        self, schedule_id: str, events: Sequence[ScheduleEvent],
        step: ScheduleStep | None = None, enqueued: bool = False,
    ) -> None:
        """Append events (keeping the newest per schedule) and, given `step`, move the
        schedule on (last_enqueued_ms too when `enqueued`), in one transaction."""

    @abstractmethod
    def park_schedule(self, schedule_id: str, spec: str, next_run_ms: int,
                      events: Sequence[ScheduleEvent]) -> bool:
        """Pause a schedule unless it moved since read (compare-and-set as a step) and
        then record `events`; False when it moved."""

    @abstractmethod
    def forget_workers(self, older_than_ms: int) -> int:
        """Delete worker rows whose heartbeat is older than the bound."""

    @abstractmethod
    def record_queue_depths(self) -> int:
        """Write per-queue unfinished counts into the current history minute bucket."""

    @abstractmethod
    def prune(self, older_than_ms: int, dry_run: bool) -> PruneReport:
        """Count (and unless dry_run delete) terminal, non-quarantined jobs finalized
        before now - older_than_ms."""

    @abstractmethod
    def prune_audit(self, older_than_ms: int, limit: int = 1000) -> int:
        """Delete at most `limit` entries older than `older_than_ms` (the oldest
        first). Returns how many went."""

    @abstractmethod
    def run_operations_batch(self, limit: int = 500) -> int:
        """Advance queued/running operations by at most `limit` jobs; returns how many
        jobs were affected (0: nothing to do). The operations duty calls this."""

    @abstractmethod
    def sample_queue_memory(self, limit: int = 100) -> int:
        """Estimate memory of up to `limit` queues from bounded samples; returns the
        number sampled."""


class Inspection(StoreBasics, Protocol):
    """Reads for the API and the console (and a producer waiting for a result)."""

    @abstractmethod
    def explain_admission(self, job_id: str) -> Explanation | None: ...

    @abstractmethod
    def unique_key_counts(self) -> UniqueKeyCounts: ...

    @abstractmethod
    def history_bucket_counts(self, older_than_ms: int) -> dict[str, BucketCounts]:
        """Per table of minute buckets (`history`, `latency`), `expired` counting the
        buckets older than `older_than_ms`."""

    @abstractmethod
    def duty_holders(self) -> list[DutyHolder]: ...

    @abstractmethod
    def list_schedules(self) -> list[Schedule]: ...

    @abstractmethod
    def get_schedule(self, schedule_id: str) -> Schedule | None: ...

    @abstractmethod
    def list_schedule_events(
        self, schedule_id: str, cursor: int | None = None, limit: int = 30
    ) -> list[ScheduleEventEntry]:
        """Newest first; `cursor` is the last event_id of the previous page."""

    @abstractmethod
    def latency_histograms(self, since_ms: int) -> list[tuple[str, int, str, int, int, int]]:
        """Job latency histogram rows of minute buckets from `since_ms` on: `(queue,
        bucket_ms, metric, le_ms, n, sum_ms)`, metric `wait` (available -> running) or
        `run` (running -> terminal), le_ms a bucket's upper bound (-1: +Inf). Kept by
        the store at admit and ack time, so they cover every process of the fleet."""

    @abstractmethod
    def latency_totals(self, since_ms: int, queue: str | None = None,
                       kind: str | None = None) -> list[tuple[str, str, str, int, int, int]]:
        """The latency histograms summed over the minute buckets from `since_ms` on,
        per queue and kind: `(queue, kind, metric, le_ms, n, sum_ms)`, narrowed to one
        queue and/or kind (kind '' holds buckets written before they had kinds)."""

    @abstractmethod
    def running_jobs(self, limit: int = 1000) -> list[RunningJob]:
        """Running jobs, soonest lease expiry first (expired ones first), at most
        `limit`: what each worker runs now, read in the order of the running jobs'
        partial index, never a scan of the table."""

    @abstractmethod
    def list_workers(self, within_ms: int) -> list[WorkerRecord]:
        """Registry rows whose last heartbeat is at most `within_ms` old."""

    @abstractmethod
    def quarantine_list(self) -> list[QuarantineEntry]: ...

    @abstractmethod
    def rate_classes(self) -> list[RateClassState]: ...

    @abstractmethod
    def rate_class_history(self, name: str, since_ms: int,
                           limit: int = 1000) -> list[RateClassChange]:
        """An adaptive class's limit changes from `since_ms` on, oldest first."""

    @abstractmethod
    def concurrency_limits(self) -> list[ConcurrencyLimit]: ...

    @abstractmethod
    def list_audit(self, *, action: str | None = None, target: str | None = None,
                   since_ms: int | None = None, cursor: int | None = None,
                   limit: int = 50, target_prefix: str | None = None) -> list[AuditEntry]:
        """Entries newest first, narrowed to one action, one target (or targets starting
        with `target_prefix`, e.g. `rate_class:`) and/or those at or after `since_ms`;
        `cursor` is the id of the previous page's last entry."""

    @abstractmethod
    def get_job(self, job_id: str, include_payload: bool = False) -> Job | None: ...

    @abstractmethod
    def get_result(self, job_id: str) -> Blob | None: ...

    def watch_finished(self, job_id: str,
                       callback: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``callback`` (from another thread) whenever ``job_id`` may have reached a
        terminal state or been deleted, in any process; returns how to stop watching, or
        None when this store has no such signal and the caller must poll (the default).
        A wake-up is a hint: the caller reads the job to learn what happened."""
        return None

    @abstractmethod
    def get_output(self, job_id: str) -> Blob | None: ...

    @abstractmethod
    def get_progress(self, job_id: str) -> Progress | None: ...

    @abstractmethod
    def list_jobs(
        self, filter: JobFilter, cursor: str | None = None, limit: int = 50,
        include_payload: bool = False,
    ) -> JobPage: ...

    @abstractmethod
    def counts(self, queue: str | None = None) -> dict[str, int]: ...

    @abstractmethod
    def queue_stats(self) -> list[QueueStats]: ...

    @abstractmethod
    def partitions(self, queue: str) -> list[PartitionState]: ...

    @abstractmethod
    def history(self, queue: str, since_ms: int, bucket_ms: int) -> list[HistoryBucket]:
        """The queue's minute buckets from `since_ms` on, merged into buckets of
        `bucket_ms` (a multiple of the minute), oldest first."""

    @abstractmethod
    def history_counters(self, since_ms: int) -> dict[str, dict[int, tuple[int, ...]]]:
        """Every queue's per-minute counters since `since_ms` in one read: queue →
        bucket start → (arrived, completed, failed, and the three rejection counts)."""

    @abstractmethod
    def forecast_inputs(self, job_ids: Sequence[str] = (),
                        queues: Sequence[str] = ()) -> ForecastInputs:
        """What the start forecast needs beyond the counters, in one read: for each of
        `job_ids` that is available, the available jobs before it in its partition's
        admission order (higher priority, then older); for each of `queues`, its
        longest-waiting available job and its available jobs by rate class."""

    @abstractmethod
    def get_operation(self, op_id: str) -> Operation | None: ...

    @abstractmethod
    def queue_extras(self) -> dict[str, QueueExtras]:
        """Per queue: memory sample and quiet-group figures (bounded reads)."""


class Control(StoreBasics, Protocol):
    """Operator mutations and the API's writes that carry an Idempotency-Key."""

    @abstractmethod
    def upsert_schedule(self, schedule: Schedule | Mapping[str, Any]) -> Schedule:
        """Validate and store `schedule`: a Schedule (e.g. one read back and edited
        with dataclasses.replace) or a mapping of its field names (id, kind and spec
        required, the others defaulted). The store's own fields, next_run_ms and the
        timestamps, are ignored if given. An unchanged spec keeps next_run_ms, a changed
        one (or a resumed schedule) re-anchors to the first tick after the store's now.
        Returns it as stored."""

    @abstractmethod
    def delete_schedule(self, schedule_id: str) -> None:
        """NotFound if missing; the schedule's enqueue events are kept."""

    @abstractmethod
    def find_schedule_run(self, schedule_id: str, idempotency_key: str) -> str | None:
        """The job a run-now with this key produced within the key's retention."""

    @abstractmethod
    def remember_schedule_run(self, schedule_id: str, idempotency_key: str, job_id: str,
                              event: ScheduleEvent, inserted: bool) -> str:
        """Record the run-now key's job and its event (and last_enqueued_ms when
        `inserted`) in one transaction; returns the job a concurrent twin recorded
        first."""

    @abstractmethod
    def signal_worker(self, worker_id: str, command: str | None) -> None: ...

    @abstractmethod
    def remove_worker(self, worker_id: str) -> None: ...

    @abstractmethod
    def operator_retry(self, job_id: str) -> None: ...

    @abstractmethod
    def operator_cancel(self, job_id: str) -> None: ...

    @abstractmethod
    def delete_job(self, job_id: str) -> None: ...

    @abstractmethod
    def promote_job(self, job_id: str) -> None: ...

    @abstractmethod
    def reschedule_job(self, job_id: str, scheduled_at_ms: int) -> None: ...

    @abstractmethod
    def edit_payload(
        self, job_id: str, payload: bytes, schema_version: int, fingerprint: str
    ) -> None: ...

    @abstractmethod
    def quarantine_release(self, fingerprint: str) -> int: ...

    @abstractmethod
    def set_queue_paused(self, queue: str, paused: bool) -> None: ...

    @abstractmethod
    def set_queue_weight(self, queue: str, weight: int) -> None: ...

    @abstractmethod
    def set_enqueue_limit(self, queue: str, limit: int | None) -> None: ...

    @abstractmethod
    def upsert_rate_class(
        self, name: str, limit: int, window_ms: int, burst: int | None = None,
        paused: bool = False, adaptive: Adaptive | None = None,
    ) -> None:
        """Create or replace a class; with `adaptive`, its limit then moves between the
        bounds as handlers report throttles and successes (core/adaptive.py)."""

    @abstractmethod
    def upsert_concurrency_limit(
        self, name: str, queue: str, max_concurrent: int, on_saturated: str = "queue"
    ) -> None: ...

    @abstractmethod
    def delete_rate_class(self, name: str, force: bool = False) -> int:
        """Delete rate class `name` (NotFound when there is none) unless available jobs
        wait on it; returns how many wait, and deletes only when none do or `force`."""

    @abstractmethod
    def delete_concurrency_limit(self, name: str, force: bool = False) -> int:
        """Delete concurrency limit `name` (NotFound when there is none) unless jobs of
        its queue are available or running; returns how many, and deletes only when
        none are or `force`."""

    @abstractmethod
    def record_audit(self, actor: str, action: str, target: str, *, status: int = 200,
                     outcome: str = "ok",
                     detail: Mapping[str, Any] | None = None) -> AuditEntry:
        """Append one entry stamped with the store's now; returns it. `actor` is a
        name, never a credential; `detail` a JSON-able mapping (InvalidInput if not)."""

    @abstractmethod
    def create_operation(
        self, action: str, selector: dict[str, Any], dry_run: bool = False
    ) -> Operation:
        """Record a bulk action (retry|cancel|delete) over the jobs `selector` names
        (queue, state, kind, partition_key, older_than_ms; at least one) with a bounded
        estimate. Dry runs are done at once; others wait for `run_operations_batch`."""

    @abstractmethod
    def delete_queue(self, queue: str, force: bool = False) -> str | None:
        """Delete an empty queue (None) or, with `force`, start an operation that
        deletes its jobs and then the queue (the operation id)."""

    @abstractmethod
    def idempotency_begin(
        self, scope_key: str, request_hash: str, ttl_ms: int = 86_400_000
    ) -> IdempotencyRecord | None:
        """Claim a key (None) or return its record (done, or in_progress)."""

    @abstractmethod
    def idempotency_complete(
        self, scope_key: str, status: int, headers: dict[str, str], body: bytes
    ) -> None: ...

    @abstractmethod
    def idempotency_abort(self, scope_key: str) -> None: ...

    @abstractmethod
    def enqueue_keyed(
        self, scope_key: str, request_hash: str, envelope: Envelope, answer: Answer,
        duplicate_answer: Callable[[Duplicate], Answer | None] | None = None,
        ttl_ms: int = 86_400_000,
    ) -> KeyedEnqueue:
        """`POST /api/v1/jobs` without embedding code: the key's record, a validated
        envelope's enqueue and `answer` (what a retry replays) committed together, so
        a request costs one commit. Refusals raise as enqueue_many's do and store
        nothing, so a retry runs again."""

    @contextmanager
    def idempotent_write(self, scope_key: str, request_hash: str,
                         ttl_ms: int = 86_400_000) -> Iterator[IdempotentWrite]:
        """Begin, act and complete as one unit. This default makes it three transactions
        (begin, the caller's own, complete or abort) with `conn` None; the SQL stores
        make it one, so a request costs one commit."""
        tx = IdempotentWrite(self.idempotency_begin(scope_key, request_hash, ttl_ms))
        if tx.record is not None:
            yield tx
            return
        try:
            yield tx
        except BaseException:
            self.idempotency_abort(scope_key)
            raise
        if tx.response is None:
            self.idempotency_abort(scope_key)
        else:
            self.idempotency_complete(scope_key, *tx.response)


class Store(Producer, Admission, Maintenance, Inspection, Control, ABC):
    """The whole port, which an adapter implements as one class; callers depend on the
    narrowest role they use (a worker on Admission, the duties on Maintenance, a
    producer Client on Producer, the API on Inspection and Control)."""
