"""The duty runner: background maintenance on APScheduler, once per fleet.

Every duty is an APScheduler interval job that first claims (or renews) its singleton
duty lease in the store — a compare-and-set on store time — and skips the tick when
another process holds it. So any number of `headgate serve` (and worker) processes on
one database run each duty in exactly one of them, and a holder that dies is replaced
as soon as its lease expires (TTL = 3 intervals, at least MIN_TTL_MS: one slow tick does
not hand a duty over). While a run lasts, a keeper thread renews its lease every third
of the TTL, so a run longer than the TTL is not run a second time elsewhere meanwhile;
a renewal that finds the lease lapsed or taken marks the run as having lost it, and
`still_held(name)` tells the run (the scheduler checks it before every schedule and
tick). A process that steps down (`stop()`, `resign()`) expires its leases at once, so
another takes over on its next tick instead of after the TTL.

The scheduler has its own small thread pool, `max_instances=1` (a slow duty is never
run twice at once in one process) and `coalesce=True` (ticks missed while it ran
collapse into one). A duty that raises is logged and counted and runs again next tick;
it never stops the scheduler.

Duties: reclaimer, promoter, scheduler (periodic schedules), retention, operations
(bulk operations, `advance_operations`), worker_aging, history, counters (a new
generation of PostgreSQL's counter rows). `run_duty` adds more.

`OperationsRunner` runs the operations duty's step without a lease, in a thread of
its own: an app that runs no duties (an embedding one, `headgate serve --no-duties`)
still finishes the bulk operations its routes create.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from headgate.core import StoreUnavailable
from headgate.services.config import (
    MIN_AUDIT_RETENTION_MS,
    MIN_HISTORY_RETENTION_MS,
    audit_retention_ms_from_env,
    history_retention_ms_from_env,
)
from headgate.services.scheduling import fire_due_schedules
from headgate.services.streak import FailureStreak
from headgate.store.port import Maintenance, Store

if TYPE_CHECKING:
    from headgate.services.client import Client

log = logging.getLogger("headgate.duties")

# Seconds between ticks. Fast duties keep lease recovery and schedules on time; slow
# ones are bounded housekeeping.
DEFAULT_INTERVALS: dict[str, float] = {
    "reclaimer": 1.0,
    "promoter": 1.0,
    "scheduler": 1.0,
    "retention": 10.0,
    "operations": 1.0,
    "worker_aging": 60.0,
    "history": 15.0,
    "counters": 2.0,
}
STANDARD_DUTIES = tuple(DEFAULT_INTERVALS)
MIN_TTL_MS = 3_000
DEFAULT_THREADS = 4
# Rows per batch of a draining duty and of the operations runner. On SQLite a batch holds
# the one writer's lock from start to end, and a worker's claim waits for it: 250 rows
# take a few ms, about the time a claim itself holds the lock.
DEFAULT_BATCH = 250
# How long one tick of a draining duty may spend in full batches (the pauses between
# them aside): bounded so a tick cannot hold a duty thread for long, yet not bounded by
# a batch count, which would cap pruning at count x batch / interval (10 x 1,000 / 10 s)
# and let a faster workload outgrow it.
DEFAULT_DRAIN_BUDGET_S = 2.0
# After each full batch a draining duty pauses DRAIN_PAUSE_RATIO times as long as the
# batch took, up to DRAIN_PAUSE_MAX_S. Each batch is its own write transaction, but on
# SQLite a loop that takes the one writer's lock again at once can keep other
# processes' writers out for a whole tick (claims and enqueues waited out retention's
# ticks under a steady load). Even an equal pause halves a worker's claims while a tick
# runs: a load at half the drain capacity then backed up for a few hundred ms every tick.
DRAIN_PAUSE_RATIO = 3.0
DRAIN_PAUSE_MAX_S = 0.05
DEFAULT_FORGET_WORKERS_MS = 24 * 3_600_000
DEFAULT_MISFIRE_GRACE_MS = 60_000
DEFAULT_RESIGN_COOLDOWN_MS = 60_000
SCHEDULES_PER_TICK = 500
# The operations runner: jobs per batch, its poll while idle (for operations another
# process created or a restart left), its pause after a failed batch.
OPERATIONS_BATCH = 500
OPERATIONS_IDLE_POLL_S = 1.0
OPERATIONS_ERROR_BACKOFF_S = 2.0


def default_holder() -> str:
    """host:pid:random — unique per process even across pid reuse and containers."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass
class DutyStats:
    """Per-duty counters, for tests, logs and a future status endpoint."""

    runs: int = 0  # ticks this process held the lease and ran the duty
    skipped: int = 0  # ticks another process held the lease
    errors: int = 0  # runs that raised
    claim_errors: int = 0  # ticks where the lease could not be read (store down)
    last_result: Any = None
    last_error: str | None = None


@dataclass
class _Lease:
    """This process's view of a duty lease during one run of the duty."""

    valid_until: float  # time.monotonic() by which the store lets it expire
    lost: bool = False

    def held(self) -> bool:
        return not self.lost and time.monotonic() < self.valid_until


@dataclass
class _Duty:
    name: str
    fn: Callable[[], object]
    interval_s: float
    held: bool = False
    lease: _Lease | None = None  # set while a run lasts
    stats: DutyStats = field(default_factory=DutyStats)
    claim_failures: FailureStreak = field(default_factory=FailureStreak)
    run_failures: FailureStreak = field(default_factory=FailureStreak)

    @property
    def ttl_ms(self) -> int:
        return max(MIN_TTL_MS, int(self.interval_s * 3000))


class DutyRunner:
    """Runs the maintenance duties of one process under duty leases.

    `intervals` overrides DEFAULT_INTERVALS (seconds) per duty; `duties` picks which of
    the standard duties to run (default: all). `client` is the producer whose enqueue
    authorizer, middleware and hooks apply to periodic jobs (default: a plain Client).
    """

    def __init__(
        self,
        store: Store,
        holder: str | None = None,
        client: Client | None = None,
        intervals: Mapping[str, float] | None = None,
        *,
        duties: Iterable[str] | None = None,
        threads: int = DEFAULT_THREADS,
        batch_size: int = DEFAULT_BATCH,
        drain_budget_s: float = DEFAULT_DRAIN_BUDGET_S,
        forget_workers_after_ms: int = DEFAULT_FORGET_WORKERS_MS,
        misfire_grace_ms: int = DEFAULT_MISFIRE_GRACE_MS,
        history_retention_ms: int | None = None,
        audit_retention_ms: int | None = None,
    ) -> None:
        merged = dict(DEFAULT_INTERVALS)
        for name, seconds in (intervals or {}).items():
            if name not in DEFAULT_INTERVALS:
                raise ValueError(f"unknown duty {name!r}: one of {', '.join(STANDARD_DUTIES)}")
            if not seconds > 0:
                raise ValueError(f"interval of duty {name} must be > 0 seconds")
            merged[name] = float(seconds)
        selected = STANDARD_DUTIES if duties is None else tuple(duties)
        for name in selected:
            if name not in DEFAULT_INTERVALS:
                raise ValueError(f"unknown duty {name!r}: one of {', '.join(STANDARD_DUTIES)}")
        if forget_workers_after_ms < 1:
            raise ValueError("forget_workers_after_ms must be >= 1")
        if history_retention_ms is None:  # HG_HISTORY_RETENTION_MS or its default
            history_retention_ms = history_retention_ms_from_env()
        if history_retention_ms < MIN_HISTORY_RETENTION_MS:
            raise ValueError(f"history_retention_ms must be >= {MIN_HISTORY_RETENTION_MS}")
        self.history_retention_ms = history_retention_ms
        if audit_retention_ms is None:  # HG_AUDIT_RETENTION_MS or its default
            audit_retention_ms = audit_retention_ms_from_env()
        if audit_retention_ms < MIN_AUDIT_RETENTION_MS:
            raise ValueError(f"audit_retention_ms must be >= {MIN_AUDIT_RETENTION_MS}")
        self.audit_retention_ms = audit_retention_ms
        self.store = store
        self.holder = holder or default_holder()
        self.client = client
        self.batch_size = batch_size
        if not drain_budget_s >= 0:
            raise ValueError("drain_budget_s must be >= 0")
        self.drain_budget_s = drain_budget_s
        self.forget_workers_after_ms = forget_workers_after_ms
        self.misfire_grace_ms = misfire_grace_ms
        self._lock = threading.Lock()
        self._duties: dict[str, _Duty] = {}
        self._resigned_until = 0.0
        self._stopped = False
        # APScheduler logs every job run at INFO: several lines a second per process.
        # Quiet it unless the application configured those loggers itself.
        for name in ("apscheduler.executors.default", "apscheduler.scheduler"):
            if logging.getLogger(name).level == logging.NOTSET:
                logging.getLogger(name).setLevel(logging.WARNING)
        # Imported here, not at the top: `import headgate` (producers) must not load
        # APScheduler; only a process that runs duties needs it.
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler

        self._scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=threads)},
            job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": None},
            timezone=UTC,
        )
        functions = self._standard_functions()
        for name in selected:
            self.run_duty(name, functions[name], int(merged[name] * 1000))

    # -- the duties ----------------------------------------------------------------------
    def _standard_functions(self) -> dict[str, Callable[[], object]]:
        store = self.store
        functions: dict[str, Callable[[], object]] = {
            "reclaimer": lambda: self._drain(store.reclaim_expired),
            "promoter": lambda: self._drain(store.promote_due),
            "scheduler": lambda: fire_due_schedules(
                store, limit=SCHEDULES_PER_TICK, client=self.client,
                misfire_grace_ms=self.misfire_grace_ms,
                still_held=lambda: self.still_held("scheduler")),
            "retention": self._retention,
            "worker_aging": lambda: store.forget_workers(self.forget_workers_after_ms),
            "history": store.record_queue_depths,
            "counters": store.roll_counters,
            "operations": lambda: advance_operations(store, self.batch_size),
        }
        return functions

    def _retention(self) -> int:
        """Expired jobs, waiting flags of partitions that emptied, unique keys whose
        window passed, lifecycle keys whose job is gone (a sweep continuing where it
        stopped), buckets past the history horizon, then audit entries past the audit
        horizon: each in bounded batches."""
        store = self.store
        return (self._drain(store.evict_retained) + self._drain(store.settle_partitions)
                + self._drain(store.prune_uniques)
                + self._drain(store.prune_orphan_uniques)
                + self._drain(lambda n: store.prune_history(self.history_retention_ms, n))
                + self._drain(lambda n: store.prune_audit(self.audit_retention_ms, n)))

    def _drain(self, fn: Callable[[int], int]) -> int:
        """Call a batch method until it returns a short batch or the tick's time budget
        is spent (at least one batch a tick), pausing between batches so that other
        writers get the store most of the time."""
        total = 0
        spent = 0.0
        while True:
            started = time.monotonic()
            n = fn(self.batch_size)
            took = time.monotonic() - started
            total += n
            spent += took
            if n < self.batch_size or spent >= self.drain_budget_s:
                return total
            time.sleep(min(took * DRAIN_PAUSE_RATIO, DRAIN_PAUSE_MAX_S))

    # -- the runner interface --------------------------------------------------------
    def run_duty(self, name: str, fn: Callable[[], object],
                 interval_ms: int | None = None) -> None:
        """Add a duty (before or after start): `fn` runs every `interval_ms` (default
        1000) in whichever process holds the duty lease `name`."""
        interval_s = (interval_ms if interval_ms is not None else 1000) / 1000
        if not interval_s > 0:
            raise ValueError(f"interval of duty {name} must be > 0")
        with self._lock:
            if name in self._duties:
                raise ValueError(f"duty {name!r} is already registered")
            self._duties[name] = _Duty(name, fn, interval_s)
        self._scheduler.add_job(
            self._tick, "interval", args=(name,), id=name, name=f"duty:{name}",
            seconds=interval_s, next_run_time=datetime.now(UTC),
        )

    def start(self) -> None:
        with self._lock:
            if self._stopped or self._scheduler.running:
                return
            self._scheduler.start()
        log.info("duties: %s started (%s)", self.holder, ", ".join(self._duties))

    def stop(self) -> None:
        """Stop ticking, wait for running duties, and release held leases so another
        process takes over on its next tick. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            running = self._scheduler.running
        if running:
            self._scheduler.shutdown(wait=True)
        self._release_all()
        log.info("duties: %s stopped", self.holder)

    def resign(self, cooldown_ms: int = DEFAULT_RESIGN_COOLDOWN_MS) -> None:
        """Step down from every duty lease and do not compete for `cooldown_ms`, so
        another process takes over; afterwards compete again like any other (a lone
        process that resigned does not leave the fleet without duties forever)."""
        with self._lock:
            self._resigned_until = time.monotonic() + cooldown_ms / 1000
        self._release_all()
        log.info("duties: %s resigned for %d ms", self.holder, cooldown_ms)

    def rejoin(self) -> None:
        """End a resignation early."""
        with self._lock:
            self._resigned_until = 0.0

    def held(self) -> list[str]:
        with self._lock:
            return sorted(d.name for d in self._duties.values() if d.held)

    def still_held(self, name: str) -> bool:
        """Whether the running duty `name` still holds its lease: a long run asks this
        before each step with effects another holder must not repeat."""
        with self._lock:
            lease = self._duties[name].lease
        return lease is not None and lease.held()

    @property
    def stats(self) -> dict[str, DutyStats]:
        with self._lock:
            return {name: d.stats for name, d in self._duties.items()}

    def stats_dict(self) -> dict[str, dict[str, Any]]:
        """JSON-friendly snapshot of `stats`."""
        out = {}
        for name, s in self.stats.items():
            row = asdict(s)
            if not isinstance(row["last_result"], int | float | str | bool | None):
                row["last_result"] = repr(row["last_result"])
            out[name] = row
        return out

    # -- internals -------------------------------------------------------------------
    def _stepping_down(self) -> bool:
        return self._stopped or time.monotonic() < self._resigned_until

    def _tick(self, name: str) -> None:
        with self._lock:
            duty = self._duties[name]
            if self._stepping_down():
                return
        claimed_at = time.monotonic()
        try:
            held = self.store.claim_duty(name, self.holder, duty.ttl_ms)
        except Exception as exc:  # noqa: BLE001 - e.g. a locked database: next tick
            duty.stats.claim_errors += 1
            self._set_held(duty, False)
            if duty.claim_failures.failed():
                log.warning("duty %s: claim failed (%d in a row): %s", name,
                            duty.claim_failures.failures, exc)
            return
        if failures := duty.claim_failures.succeeded():
            log.info("duty %s: claims work again after %d failures", name, failures)
        with self._lock:
            stepping_down = self._stepping_down()
        if held and stepping_down:  # resigned while claiming: give it straight back
            self._release(duty)
            return
        self._set_held(duty, held)
        if not held:
            duty.stats.skipped += 1
            return
        lease = _Lease(claimed_at + duty.ttl_ms / 1000)
        done = threading.Event()
        keeper = threading.Thread(target=self._keep, args=(duty, lease, done),
                                  name=f"duty-lease:{name}", daemon=True)
        with self._lock:
            duty.lease = lease
        keeper.start()
        try:
            self._run(duty)
        finally:
            done.set()
            with self._lock:
                duty.lease = None
            if lease.lost:
                self._set_held(duty, False)

    def _run(self, duty: _Duty) -> None:
        try:
            result = duty.fn()
        except Exception as exc:  # noqa: BLE001 - a failing duty must not stop the others
            duty.stats.errors += 1
            duty.stats.last_error = f"{type(exc).__name__}: {exc}"
            if duty.run_failures.failed():
                log.exception("duty %s failed (%d in a row); it runs again next tick",
                              duty.name, duty.run_failures.failures)
            return
        if failures := duty.run_failures.succeeded():
            log.info("duty %s: runs again after %d failures", duty.name, failures)
        duty.stats.runs += 1
        duty.stats.last_result = result
        if result:
            log.debug("duty %s: %s", duty.name, result)

    def _keep(self, duty: _Duty, lease: _Lease, done: threading.Event) -> None:
        """Renew the lease of a running duty until `done`, so a run longer than the TTL
        is not started a second time by another process."""
        ttl_s = duty.ttl_ms / 1000
        failures = 0
        while not done.wait(ttl_s / 3):
            started = time.monotonic()
            try:
                renewed = self.store.renew_duty(duty.name, self.holder, duty.ttl_ms)
            except Exception as exc:  # noqa: BLE001 - retried; the lease runs out meanwhile
                failures += 1
                if failures == 1:
                    log.warning("duty %s: lease renewal failed: %s", duty.name, exc)
                continue
            if not renewed:
                lease.lost = True
                if not done.is_set() and not self._stepping_down():
                    log.warning("duty %s: %s lost its lease while the duty ran",
                                duty.name, self.holder)
                return
            failures = 0
            lease.valid_until = started + ttl_s

    def _set_held(self, duty: _Duty, held: bool) -> None:
        if held != duty.held:
            log.info("duties: %s %s %s", self.holder, "took" if held else "does not hold",
                     duty.name)
        duty.held = held

    def _release(self, duty: _Duty) -> None:
        try:
            self.store.release_duty(duty.name, self.holder)
        except Exception as exc:  # noqa: BLE001 - best effort: the TTL covers it
            log.warning("duty %s: release failed: %s", duty.name, exc)
            return
        duty.held = False

    def _release_all(self) -> None:
        with self._lock:
            duties = [d for d in self._duties.values() if d.held]
        for duty in duties:
            self._release(duty)


def advance_operations(store: Maintenance, batch: int) -> int:
    """The operations duty's step: move the queued and running bulk operations on by
    at most `batch` jobs; how many were affected (0: nothing to do)."""
    return store.run_operations_batch(batch)


class OperationsRunner:
    """The operations duty's step in a loop, for a process without duties: it runs
    until a step finds nothing to do, then waits until woken (an operation created
    here) or OPERATIONS_IDLE_POLL_S pass."""

    def __init__(self, store: Maintenance, batch: int = OPERATIONS_BATCH) -> None:
        self.store = store
        self.batch = batch
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="headgate-operations", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                did = advance_operations(self.store, self.batch)
            except StoreUnavailable as exc:
                log.warning("operations runner: %s", exc)
                self._stop.wait(OPERATIONS_ERROR_BACKOFF_S)
                continue
            except Exception:  # noqa: BLE001 - keep the runner alive; the op records it
                log.exception("operations runner failed a batch")
                self._stop.wait(OPERATIONS_ERROR_BACKOFF_S)
                continue
            if did:
                continue
            self._wake.wait(OPERATIONS_IDLE_POLL_S)
            self._wake.clear()
