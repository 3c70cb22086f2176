"""The worker runtime (SPEC §8): admit for free capacity, run handlers, keep leases,
heartbeat, obey operator signals, shut down without losing or double-charging work.

Threads of one worker, all daemons (a handler stuck in C code must never keep the
process alive after shutdown has released its job):

- **dispatcher** — owns the hot-path writes: acknowledges every finished attempt
  queued since its last turn in ONE ``store.ack_many`` transaction, then asks the store
  for at most the free capacity. One writer thread per process means no busy-waiting
  on SQLite's write lock between our own threads, and acks batch themselves under load
  (whatever finished while the previous transaction ran goes into the next). It backs
  off on empty polls and wakes early on in-process activity, a change probe, or a freed
  slot after a full poll (see ``polling``);
- **pool** — ``concurrency`` threads running handlers; a finished handler queues its
  decision for the dispatcher and takes the next job;
- **lease keeper** — renews every in-flight lease in one ``store.renew`` call every
  ``lease_ms / 3``; enforces per-attempt timeouts and deadlines;
- **heartbeat** — upserts the registry row every ``heartbeat_ms`` (and at once after a
  state change), applies the signal and the cancellations in the reply;
- **duties** (optional) — reclaimer and promoter under singleton duty leases.

An attempt ends in exactly one of: an ack (the outcome), a release (shutdown: back to
available, nothing charged), or abandonment (the store says it is no longer ours:
lease lost or operator cancel — the store already decided its fate, so we write
nothing). ``_Attempt.settled`` makes that choice once, whichever thread gets there
first.

Choices where the spec is silent:

- The registry row is kept on exit with status ``stopped`` (not deleted): the
  dashboard can show that a worker left cleanly, and stale-worker aging forgets it.
  Statuses: running, quiet, stopping (terminate / SIGTERM), restarting, stopped.
- ``resign`` steps down from duty leases for ``resign_cooldown_ms`` (60 s), then this
  worker competes again — so a lone worker cannot leave the fleet without a reclaimer.
- While acks cannot be written (store unavailable) the dispatcher admits nothing; acks
  older than a lease are given up (the reclaimer recovers those jobs).
- A lease that could not be renewed until its expiry is treated as lost: the handler
  is cancelled and the job handed back with ``release`` (a no-op if someone else
  already reclaimed it), so a store outage is not charged as a crash when avoidable.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from headgate.core import (
    AckRequest,
    Claim,
    InvalidInput,
    Job,
    LeaseLost,
    Outcome,
    StoreUnavailable,
)
from headgate.store.port import Store

from . import isolation
from .context import DEFAULT_MAX_LOG_LINES, AttemptGate, JobContext, LogCapture, job_logger
from .decoders import Decoder
from .duties import DEFAULT_RESIGN_COOLDOWN_MS, WorkerDuties, worker_duty_runner
from .execution import Decision, error_text, from_exception, from_value
from .outcomes import JobOutcome, Undecodable
from .polling import Backoff, change_probe

log = logging.getLogger("headgate.worker")
job_log = logging.getLogger("headgate.job")

Handler = Callable[[Job, JobContext], Any]

EXIT_OK = 0
# EX_TEMPFAIL from sysexits.h: "try again" — a supervisor should start a fresh process.
EXIT_RESTART = 75
# A second SIGTERM/SIGINT during the drain: released what it could, then left.
EXIT_FORCED = 1

STATUS_RUNNING = "running"
STATUS_QUIET = "quiet"
STATUS_STOPPING = "stopping"
STATUS_RESTARTING = "restarting"
STATUS_STOPPED = "stopped"

# A job header naming an absolute deadline (epoch ms); wins over the handler option.
DEADLINE_HEADER = "deadline_at_ms"

TIMED_OUT = "timed out"
DEADLINE = "deadline exceeded"
NOT_OURS = "no longer running in the store (operator cancel or lease lost)"
LEASE_EXPIRED = "lease expired while the store was unreachable"
RELEASED = "released at shutdown"


def _positive_ms(name: str, value: int | None, *, optional: bool = True) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{name} must be an integer >= 1 (milliseconds)")
    return value


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    kind: str
    fn: Handler
    decoder: Decoder | None = None
    timeout_ms: int | None = None
    deadline_ms: int | None = None
    isolated: bool | None = None  # None: the worker-wide setting


class _Attempt:
    """One claim being worked on by this process."""

    def __init__(self, claim: Claim, spec: HandlerSpec | None, lease_ok_until: float) -> None:
        self.claim = claim
        self.job = claim.job
        self.spec = spec
        self.gate = AttemptGate()
        self.capture: LogCapture | None = None
        self.ctx: JobContext | None = None
        self.started = time.monotonic()
        self.timeout_at: float | None = None
        self.timeout_ms: int | None = None
        self.deadline_at: float | None = None
        self.cancelled_at: float | None = None
        self.lease_ok_until = lease_ok_until
        self.isolated = False
        self.process: Any = None
        self.thread_done = False
        self.settled = False  # its end is decided (ack queued, abandoned or released)
        self.finished = False  # ...and carried out: nothing more will be written
        self.acking = False
        self._lock = threading.Lock()

    @property
    def key(self) -> tuple[str, int]:
        return (self.job.id, self.claim.fence)

    def settle(self) -> bool:
        """Claim the right to end this attempt; True for exactly one caller."""
        with self._lock:
            if self.settled:
                return False
            self.settled = True
            return True


class Worker:
    """A pool of handler threads fed by admission decisions of the store.

    ``Worker(store, queues=["default"], concurrency=10, lease_ms=30_000)`` then register
    handlers with ``@worker.handler("kind")`` and call ``worker.run()`` (blocks; returns
    the exit code) or ``worker.start()`` / ``worker.stop()`` (background thread).

    Durations are milliseconds. Notable options:

    - ``timeout_ms`` (per attempt, also per handler): when it passes, ``ctx.cancelled``
      is set; the attempt is recorded as a retry "timed out" as soon as the handler
      returns, or after ``timeout_grace_ms`` if it does not (its thread then stays
      busy — counted against capacity — until it returns; use isolated mode for code
      that cannot be interrupted, where the child is killed instead).
    - ``deadline_ms`` (per handler or worker): a job is worthless after
      ``enqueued_at_ms + deadline_ms`` (or the absolute epoch-ms in its
      ``deadline_at_ms`` header). Not started by then → ``skip`` (archived, never
      retried: retrying cannot meet a deadline). Reached while running → cancelled,
      then ``skip`` with "deadline exceeded".
    - ``duties=True`` runs the reclaimer and promoter in this process under duty leases
      (``duty_runner`` replaces the default runner, e.g. one with more duties).
    - ``isolated=True`` runs every handler (unless it says otherwise) in a child process.
    - ``poll_floor_ms`` / ``poll_ceiling_ms``: empty-poll backoff. ``probe_interval_ms``:
      how often the cheap change probe is consulted between polls; after
      ``idle_after_ms`` without work it relaxes to ``idle_probe_interval_ms`` (each
      consultation is a thread wake-up: every 2 ms costs ~2.5% of a core, every 20 ms
      ~0.3%; a busy worker reacts in ~2 ms, a long-idle one within ~20 ms).
    - ``log_on_success``: also record captured log lines for successful attempts
      (default: only attempts that did not succeed carry their logs into the history).
    """

    def __init__(
        self,
        store: Store,
        queues: Sequence[str] = ("default",),
        concurrency: int = 10,
        lease_ms: int = 30_000,
        worker_id: str | None = None,
        *,
        heartbeat_ms: int = 2_000,
        drain_ms: int = 30_000,
        timeout_ms: int | None = None,
        deadline_ms: int | None = None,
        timeout_grace_ms: int = 5_000,
        kill_grace_ms: int = 5_000,
        isolated: bool = False,
        duties: bool = False,
        duty_interval_ms: int = 1_000,
        duty_runner: WorkerDuties | None = None,
        resign_cooldown_ms: int = DEFAULT_RESIGN_COOLDOWN_MS,
        poll_floor_ms: int = 5,
        poll_ceiling_ms: int = 1_000,
        probe_interval_ms: int = 2,
        idle_probe_interval_ms: int = 20,
        idle_after_ms: int = 5_000,
        hint_ceiling_ms: int = 100,
        quantum: int | None = None,
        max_log_lines: int = DEFAULT_MAX_LOG_LINES,
        job_log_level: int = logging.INFO,
        log_on_success: bool = False,
    ) -> None:
        self.store = store
        self.worker_id = worker_id or default_worker_id()
        self._handlers: dict[str, HandlerSpec] = {}
        self.heartbeat_ms = _positive_ms("heartbeat_ms", heartbeat_ms, optional=False)
        self.timeout_grace_ms = _positive_ms("timeout_grace_ms", timeout_grace_ms,
                                             optional=False)
        self.kill_grace_ms = _positive_ms("kill_grace_ms", kill_grace_ms, optional=False)
        self.duty_interval_ms = _positive_ms("duty_interval_ms", duty_interval_ms,
                                             optional=False)
        self.resign_cooldown_ms = resign_cooldown_ms
        self.poll_floor_ms = _positive_ms("poll_floor_ms", poll_floor_ms, optional=False)
        self.poll_ceiling_ms = _positive_ms("poll_ceiling_ms", poll_ceiling_ms, optional=False)
        self.probe_interval_ms = _positive_ms("probe_interval_ms", probe_interval_ms,
                                              optional=False)
        self.hint_ceiling_ms = _positive_ms("hint_ceiling_ms", hint_ceiling_ms, optional=False)
        self.idle_probe_interval_ms = _positive_ms("idle_probe_interval_ms",
                                                   idle_probe_interval_ms, optional=False)
        self.idle_after_ms = _positive_ms("idle_after_ms", idle_after_ms, optional=False)
        self.quantum = quantum
        self.max_log_lines = max_log_lines
        self.job_log_level = job_log_level
        self.log_on_success = log_on_success
        self._duty_runner = duty_runner
        self.configure(queues=queues, concurrency=concurrency, lease_ms=lease_ms,
                       drain_ms=drain_ms, timeout_ms=timeout_ms, deadline_ms=deadline_ms,
                       isolated=isolated, duties=duties)

        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, int], _Attempt] = {}
        self._busy = 0
        self._work: queue.SimpleQueue[_Attempt | None] = queue.SimpleQueue()
        self._reasons: set[str] = set()
        self._acks: collections.deque[tuple[_Attempt, Decision, float]] = collections.deque()
        self._wake = threading.Event()
        self._hb_wake = threading.Event()
        self._keeper_wake = threading.Event()
        self._stop_requested = threading.Event()
        self._stopping = threading.Event()
        self._threads_stop = threading.Event()
        self._done = threading.Event()
        self._quiet = False
        self._stop_status = STATUS_STOPPING
        self._exit_code = EXIT_OK
        self._drain_override: int | None = None
        self._stopped = False
        self._started = False
        self._threads: list[threading.Thread] = []
        self._bg_thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.polls = 0
        self.empty_polls = 0
        self.started_at_ms = 0
        self._preload: list[str] = []

    # -- configuration ------------------------------------------------------------------
    def configure(
        self, *, queues: Sequence[str] | None = None, concurrency: int | None = None,
        lease_ms: int | None = None, drain_ms: int | None = None,
        timeout_ms: int | None = None, deadline_ms: int | None = None,
        isolated: bool | None = None, duties: bool | None = None,
        worker_id: str | None = None,
    ) -> Worker:
        """Change settings before ``run``/``start`` (the CLI's overrides use this)."""
        if getattr(self, "_started", False):
            raise RuntimeError("configure() must be called before the worker starts")
        if queues is not None:
            if isinstance(queues, str):
                queues = [q for q in queues.split(",") if q]
            names = list(dict.fromkeys(queues))
            if not names or not all(isinstance(q, str) and q for q in names):
                raise InvalidInput("queues must be a non-empty list of queue names")
            self.queues = names
        if concurrency is not None:
            if isinstance(concurrency, bool) or not isinstance(concurrency, int) \
                    or concurrency < 1:
                raise InvalidInput("concurrency must be an integer >= 1")
            self.concurrency = concurrency
        if lease_ms is not None:
            self.lease_ms = _positive_ms("lease_ms", lease_ms, optional=False)
        if drain_ms is not None:
            if isinstance(drain_ms, bool) or not isinstance(drain_ms, int) or drain_ms < 0:
                raise InvalidInput("drain_ms must be an integer >= 0 (milliseconds)")
            self.drain_ms = drain_ms
        if timeout_ms is not None or not hasattr(self, "timeout_ms"):
            self.timeout_ms = _positive_ms("timeout_ms", timeout_ms)
        if deadline_ms is not None or not hasattr(self, "deadline_ms"):
            self.deadline_ms = _positive_ms("deadline_ms", deadline_ms)
        if isolated is not None:
            self.isolated = bool(isolated)
        if duties is not None:
            self.duties = bool(duties)
        if worker_id is not None:
            self.worker_id = worker_id
        return self

    def handler(
        self, kind: str, *, aliases: Iterable[str] = (), decoder: Decoder | None = None,
        timeout_ms: int | None = None, deadline_ms: int | None = None,
        isolated: bool | None = None,
    ) -> Callable[[Handler], Handler]:
        """Decorator registering ``fn(job, ctx)`` for ``kind`` (and ``aliases``, e.g. the
        kind's old name while producers migrate). Returns ``fn`` unchanged, so it stays
        importable by name — which isolated mode needs."""

        def register(fn: Handler) -> Handler:
            self.register(kind, fn, aliases=aliases, decoder=decoder, timeout_ms=timeout_ms,
                          deadline_ms=deadline_ms, isolated=isolated)
            return fn

        return register

    def register(
        self, kind: str, fn: Handler, *, aliases: Iterable[str] = (),
        decoder: Decoder | None = None, timeout_ms: int | None = None,
        deadline_ms: int | None = None, isolated: bool | None = None,
    ) -> None:
        if self._started:
            raise RuntimeError("handlers must be registered before the worker starts")
        if not callable(fn):
            raise TypeError("handler must be callable as fn(job, ctx)")
        spec = HandlerSpec(kind, fn, decoder, _positive_ms("timeout_ms", timeout_ms),
                           _positive_ms("deadline_ms", deadline_ms), isolated)
        if isolated:
            isolation.handler_ref(fn)  # fail at registration, not at the first job
        for name in (kind, *aliases):
            if not isinstance(name, str) or not name:
                raise InvalidInput("handler kind must be a non-empty string")
            if name in self._handlers:
                raise ValueError(f"a handler for kind {name!r} is already registered")
            self._handlers[name] = spec

    @property
    def kinds(self) -> list[str]:
        return sorted(self._handlers)

    # -- lifecycle ----------------------------------------------------------------------
    def run(self) -> int:
        """Work until stopped by ``stop()``, a ``terminate``/``restart`` signal or
        Ctrl-C; returns the exit code (0, or ``EXIT_RESTART`` after ``restart``)."""
        self._begin()
        try:
            while not self._stop_requested.wait(0.2):
                pass
        except KeyboardInterrupt:
            log.info("interrupted; draining (interrupt again to release and stop now)")
            self._stop_requested.set()
        try:
            return self._shutdown()
        except KeyboardInterrupt:
            self.abort()
            raise

    def start(self) -> Worker:
        """Run in a background thread (embedding, tests). ``stop()`` ends it."""
        self._bg_thread = threading.Thread(target=self._run_bg, name="headgate-worker",
                                           daemon=True)
        self._bg_thread.start()
        return self

    def _run_bg(self) -> None:
        try:
            self.run()
        except Exception:  # noqa: BLE001 - reported through join()'s exit code
            log.exception("worker %s crashed", self.worker_id)
            self._exit_code = EXIT_FORCED
            self._done.set()

    def stop(self, drain_ms: int | None = None, *, wait: bool = True,
             timeout: float | None = None) -> int | None:
        """Stop admitting, drain in-flight work for up to ``drain_ms`` (default: the
        worker's), release the rest. With ``wait`` (and the worker running in another
        thread), block until done and return the exit code."""
        if drain_ms is not None:
            self._drain_override = drain_ms
        self._request_stop(EXIT_OK, STATUS_STOPPING)
        if wait and threading.current_thread() is not self._bg_thread:
            return self.join(timeout)
        return None

    def join(self, timeout: float | None = None) -> int | None:
        if not self._done.wait(timeout):
            return None
        return self._exit_code

    @property
    def status(self) -> str:
        if self._stopped:
            return STATUS_STOPPED
        if self._stopping.is_set() or self._stop_requested.is_set():
            return self._stop_status
        return STATUS_QUIET if self._quiet else STATUS_RUNNING

    @property
    def inflight(self) -> int:
        with self._lock:
            return sum(1 for a in self._inflight.values() if not a.finished)

    def abort(self) -> int:
        """Emergency stop (a second SIGTERM): release every unfinished claim now and
        kill isolated children; returns how many claims were released. The caller
        exits the process."""
        self._stop_requested.set()
        self._stopping.set()
        for attempt in self._all_attempts():
            if attempt.process is not None and attempt.process.is_alive():
                attempt.process.kill()
        # On a thread of its own: this may run in a signal handler that interrupted the
        # main thread in the middle of one of its own store transactions.
        result: list[int] = []
        helper = threading.Thread(
            target=lambda: result.append(self._release(self._unsettled(), retry_for_s=2.0)),
            name="headgate-abort", daemon=True,
        )
        helper.start()
        helper.join(timeout=3.0)
        return result[0] if result else 0

    def _begin(self) -> None:
        if self._started:
            raise RuntimeError("a Worker runs once; create a new one")
        self._started = True
        if not self._handlers:
            log.warning("worker %s has no handlers: every job it admits is undecodable",
                        self.worker_id)
        for spec in set(self._handlers.values()):
            if self._isolated(spec):
                module = isolation.handler_ref(spec.fn).partition(":")[0]
                self._preload.append(module)
        if self._preload:
            isolation.mp_context(self._preload)
        self.started_at_ms = int(time.time() * 1000)
        self._probe = change_probe(self.store)
        self._unsubscribe = self.store.activity.subscribe(self._on_activity)
        if self.duties and self._duty_runner is None:
            self._duty_runner = worker_duty_runner(self.store, self.worker_id,
                                                   self.duty_interval_ms)
        log.info(
            "worker %s starting: queues=%s concurrency=%d lease_ms=%d kinds=%s%s%s",
            self.worker_id, ",".join(self.queues), self.concurrency, self.lease_ms,
            ",".join(self.kinds) or "-", " duties" if self.duties else "",
            " isolated" if self.isolated else "",
        )
        self._spawn(self._heartbeat_loop, "headgate-heartbeat")
        self._spawn(self._keeper_loop, "headgate-leases")
        for i in range(self.concurrency):
            self._spawn(self._pool_loop, f"headgate-pool-{i}")
        self._spawn(self._dispatch_loop, "headgate-dispatch")
        if self.duties and self._duty_runner is not None:
            self._duty_runner.start()

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _request_stop(self, code: int, status: str) -> None:
        if self._stop_requested.is_set():
            return
        self._exit_code = code
        self._stop_status = status
        self._stop_requested.set()
        self._notify("control")
        self._hb_wake.set()

    def _shutdown(self) -> int:
        self._stopping.set()
        self._notify("control")
        self._hb_wake.set()
        drain_ms = self._drain_override if self._drain_override is not None else self.drain_ms
        log.info("worker %s %s: draining %d in-flight job(s) for up to %d ms", self.worker_id,
                 self._stop_status, self.inflight, drain_ms)
        deadline = time.monotonic() + drain_ms / 1000
        while self._unsettled() and time.monotonic() < deadline:
            time.sleep(0.02)
        leftovers = self._unsettled()
        if leftovers:
            released = self._release(leftovers, retry_for_s=5.0)
            log.info("worker %s: released %d unfinished job(s) without charging an attempt",
                     self.worker_id, released)
        # Let the dispatcher write the acks already decided; give isolated children
        # their SIGTERM grace. In-thread handlers are daemons and are not waited for.
        settle_deadline = time.monotonic() + self.kill_grace_ms / 1000 + 1
        while time.monotonic() < settle_deadline and any(
            a.acking or (a.process is not None and a.process.is_alive())
            for a in self._all_attempts()
        ):
            time.sleep(0.02)
        for _ in range(self.concurrency):
            self._work.put(None)
        if self._duty_runner is not None and self.duties:
            self._duty_runner.stop()
        self._threads_stop.set()
        self._keeper_wake.set()
        self._hb_wake.set()
        self._notify("control")
        for thread in self._threads:
            if thread.name in ("headgate-dispatch", "headgate-leases", "headgate-heartbeat"):
                thread.join(timeout=10)
        if self._unsubscribe is not None:
            self._unsubscribe()
        self._stopped = True
        self._heartbeat_once()
        log.info("worker %s stopped (exit code %d)", self.worker_id, self._exit_code)
        self._done.set()
        return self._exit_code

    # -- admission ------------------------------------------------------------------------
    def _on_activity(self, queues: frozenset[str]) -> None:
        if not queues or not queues.isdisjoint(self.queues):
            self._notify("activity")

    def _notify(self, reason: str) -> None:
        with self._lock:
            self._reasons.add(reason)
        self._wake.set()

    def _take_reasons(self) -> set[str]:
        self._wake.clear()  # before taking: a notify in between re-sets it
        with self._lock:
            reasons, self._reasons = self._reasons, set()
        return reasons

    def _free(self) -> int:
        with self._lock:
            return self.concurrency - self._busy

    def _admitting(self) -> bool:
        return not self._quiet and not self._stop_requested.is_set()

    def _dispatch_loop(self) -> None:
        backoff = Backoff(self.poll_floor_ms, self.poll_ceiling_ms)
        errors = Backoff(50, 5_000)
        probe = self._probe
        busy_probe_s = self.probe_interval_ms / 1000
        idle_probe_s = max(busy_probe_s, self.idle_probe_interval_ms / 1000)
        idle_after_s = self.idle_after_ms / 1000
        hint_ceiling_s = self.hint_ceiling_ms / 1000
        hint_gap = 0.0
        last_poll = 0.0
        last_work = time.monotonic()
        saturated = False
        by_hint = False
        token: object = None
        while True:
            if not self._flush_acks():
                # The store refused the batch (unavailable): back off, keep the acks.
                self._wait(errors.next_ms() / 1000, False, None, 1.0, None, 0.0, 0.0)
                if self._threads_stop.is_set() and not self._give_up_acks():
                    break
                continue
            if self._threads_stop.is_set():
                break
            free = self._free()
            delay: float | None = None  # None: nothing to poll for until something wakes us
            if self._admitting() and free > 0:
                token = probe() if probe is not None else None
                t0 = time.monotonic()
                try:
                    claims = self.store.admit(self.worker_id, self.queues, free, self.lease_ms,
                                              self.quantum)
                except StoreUnavailable as exc:
                    log.warning("admit failed, backing off: %s", exc)
                    claims, delay = None, errors.next_ms() / 1000
                except Exception:  # noqa: BLE001 - never let the loop die
                    log.exception("admit failed unexpectedly, backing off")
                    claims, delay = None, errors.next_ms() / 1000
                if claims is not None:
                    errors.reset()
                    last_poll = time.monotonic()
                    self.polls += 1
                    if claims:
                        self._dispatch(claims, t0)
                        last_work = last_poll
                        backoff.reset()
                        hint_gap = 0.0
                        saturated = len(claims) >= free
                        if not saturated:
                            delay = backoff.next_ms() / 1000
                    else:
                        self.empty_polls += 1
                        saturated = False
                        delay = backoff.next_ms() / 1000
                        if by_hint:
                            hint_gap = min(hint_ceiling_s, max(hint_gap * 2, 0.001))
            probe_s = busy_probe_s if time.monotonic() - last_work < idle_after_s \
                else idle_probe_s
            by_hint = self._wait(delay, saturated, probe, probe_s, token, last_poll, hint_gap)

    def _wait(self, delay: float | None, saturated: bool, probe: Callable[[], object] | None,
              probe_s: float, token: object, last_poll: float, hint_gap: float) -> bool:
        """Sleep until the next poll is due or worth doing early; True when the change
        probe (not the clock or an explicit wake-up) ended the wait."""
        until = time.monotonic() + (delay if delay is not None else 1.0)
        while not self._threads_stop.is_set():
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            can_admit = self._admitting() and self._free() > 0
            use_probe = probe is not None and can_admit and delay is not None
            if self._wake.wait(min(remaining, probe_s) if use_probe else remaining):
                reasons = self._take_reasons()
                if "control" in reasons or "ack" in reasons:
                    return False
                if "activity" in reasons and can_admit:
                    return False
                # A freed slot is worth an early poll only if the last poll filled every
                # slot (work is probably waiting) or we were not polling at all.
                if "slot" in reasons and (saturated or delay is None):
                    return False
                continue
            if use_probe and probe() != token and time.monotonic() - last_poll >= hint_gap:
                return True
        return False

    def _dispatch(self, claims: list[Claim], t_admit: float) -> None:
        lease_ok_until = t_admit + self.lease_ms / 1000
        for claim in claims:
            attempt = _Attempt(claim, self._handlers.get(claim.job.kind), lease_ok_until)
            with self._lock:
                self._inflight[attempt.key] = attempt
                self._busy += 1
            self._work.put(attempt)

    # -- execution ------------------------------------------------------------------------
    def _isolated(self, spec: HandlerSpec) -> bool:
        return self.isolated if spec.isolated is None else spec.isolated

    def _pool_loop(self) -> None:
        while True:
            attempt = self._work.get()
            if attempt is None:
                return
            try:
                try:
                    decision = self._run_attempt(attempt)
                except BaseException as exc:  # noqa: BLE001 - e.g. SystemExit in a handler
                    decision = from_exception(exc, attempt.job)
                self._finish(attempt, decision)
            except Exception:  # noqa: BLE001 - keep the pool thread alive
                log.exception("job %s: unexpected failure finishing the attempt", attempt.job.id)
            finally:
                with self._lock:
                    attempt.thread_done = True
                    self._busy -= 1
                    if attempt.finished:
                        self._inflight.pop(attempt.key, None)
                self._notify("slot")

    def _run_attempt(self, attempt: _Attempt) -> Decision:
        job, spec = attempt.job, attempt.spec
        if spec is None:
            return Decision(Outcome.UNDECODABLE,
                            f"no handler for kind {job.kind!r} on worker {self.worker_id}")
        deadline_ms = _deadline_wall_ms(job, spec.deadline_ms or self.deadline_ms)
        if deadline_ms is not None:
            left_ms = deadline_ms - time.time() * 1000
            if left_ms <= 0:
                return Decision(Outcome.SKIP,
                                f"deadline passed {int(-left_ms)} ms before the job started")
            attempt.deadline_at = time.monotonic() + left_ms / 1000
        raw = job.payload if job.payload is not None else b""
        try:
            payload = spec.decoder(raw, job.schema_version) if spec.decoder else raw
        except Undecodable as exc:
            return Decision(Outcome.UNDECODABLE, exc.error_text())
        except Exception as exc:  # noqa: BLE001 - any decode failure is permanent
            return Decision(Outcome.UNDECODABLE, f"decode failed: {error_text(exc)}")
        capture = LogCapture(self.max_log_lines, forward_to=job_log)
        attempt.capture = capture
        logger = job_logger(job, capture, self.job_log_level)
        timeout_ms = spec.timeout_ms or self.timeout_ms
        now = time.monotonic()
        if timeout_ms is not None:
            attempt.timeout_ms = timeout_ms
            attempt.timeout_at = now + timeout_ms / 1000
        ends = [t for t in (attempt.timeout_at, attempt.deadline_at) if t is not None]
        ctx = JobContext(self.store, attempt.claim, payload, attempt.gate, logger,
                         self.worker_id, min(ends) if ends else None)
        attempt.ctx = ctx
        self._keeper_wake.set()  # pick up the new timeout
        if self._isolated(spec):
            attempt.isolated = True

            def on_process(process: Any) -> None:
                attempt.process = process

            return isolation.run_isolated(
                isolation.handler_ref(spec.fn), ctx, capture, self.kill_grace_ms / 1000,
                self._preload, on_process, self.job_log_level,
            )
        try:
            value = spec.fn(job, ctx)
        except JobOutcome as outcome:
            return from_exception(outcome, job)
        except Exception as exc:  # noqa: BLE001 - any other exception is a retry
            return from_exception(exc, job)
        return from_value(value, job, ctx.result, ctx.result_schema_version)

    def _finish(self, attempt: _Attempt, decision: Decision) -> None:
        """Decide the attempt's end, unless another path already did, and queue its ack
        for the dispatcher."""
        if not attempt.settle():
            return
        gate = attempt.gate
        if gate.closed:
            log.info("job %s %s: abandoned (%s); its outcome %s is discarded",
                     attempt.job.id, attempt.job.kind, gate.reason, decision.label)
            self._done_with(attempt)
            return
        if gate.reason == TIMED_OUT:
            decision = Decision(Outcome.RETRY, f"timed out after {attempt.timeout_ms} ms")
        elif gate.reason == DEADLINE:
            decision = Decision(Outcome.SKIP, "deadline exceeded while running")
        if attempt.capture is not None and (
            decision.outcome is not Outcome.SUCCESS or self.log_on_success
        ):
            decision.logs = attempt.capture.lines()
        attempt.acking = True
        with self._lock:
            self._acks.append((attempt, decision, time.monotonic()))
        self._notify("ack")

    def _done_with(self, attempt: _Attempt) -> None:
        """Nothing more will be written for this attempt; drop it once its thread is
        free too."""
        with self._lock:
            attempt.finished = True
            attempt.acking = False
            if attempt.thread_done:
                self._inflight.pop(attempt.key, None)

    def _flush_acks(self) -> bool:
        """Write every queued ack in one transaction; False when the store was
        unavailable (the acks stay queued)."""
        with self._lock:
            batch = list(self._acks)
            self._acks.clear()
        if not batch:
            return True
        ack_many = getattr(self.store, "ack_many", None)
        if ack_many is None:
            for attempt, decision, _ in batch:
                self._ack_one(attempt, decision)
            return True
        requests = [
            AckRequest(a.claim, d.outcome.value, d.error, d.delay_ms, d.result,
                       d.result_schema_version, tuple(d.logs))
            for a, d, _ in batch
        ]
        try:
            lost = set(ack_many(requests))
        except StoreUnavailable as exc:
            log.warning("acking %d job(s) failed, will retry: %s", len(batch), exc)
            with self._lock:
                self._acks.extendleft(reversed(batch))
            self._give_up_acks()
            return False
        except Exception as exc:  # noqa: BLE001 - e.g. one invalid outcome: isolate it
            log.warning("batch ack failed (%s); acking one by one", exc)
            for attempt, decision, _ in batch:
                self._ack_one(attempt, decision)
            return True
        for attempt, decision, _ in batch:
            if attempt.job.id in lost:
                attempt.gate.close("lease lost")
                log.info("job %s %s: lease lost before the ack; outcome %s discarded",
                         attempt.job.id, attempt.job.kind, decision.label)
            else:
                self._log_outcome(attempt, decision)
            self._done_with(attempt)
        return True

    def _give_up_acks(self) -> bool:
        """Drop queued acks older than a lease (the reclaimer has them by now); True
        while some are still worth retrying."""
        now = time.monotonic()
        stopping = self._threads_stop.is_set()
        keep, dropped = [], []
        with self._lock:
            for item in self._acks:
                fresh = now - item[2] < self.lease_ms / 1000
                (keep if fresh and not stopping else dropped).append(item)
            self._acks = collections.deque(keep)
        for attempt, _, _ in dropped:
            log.error("job %s: ack could not be written; the lease will expire and the "
                      "reclaimer will retry it", attempt.job.id)
            self._done_with(attempt)
        return bool(keep)

    def _ack_one(self, attempt: _Attempt, decision: Decision) -> None:
        job = attempt.job
        give_up_at = time.monotonic() + self.lease_ms / 1000
        delay = 0.05
        try:
            while True:
                try:
                    self.store.ack(
                        attempt.claim, decision.outcome, decision.error, decision.delay_ms,
                        decision.result, result_schema_version=decision.result_schema_version,
                        logs=decision.logs,
                    )
                    self._log_outcome(attempt, decision)
                    return
                except LeaseLost:
                    attempt.gate.close("lease lost")
                    log.info("job %s %s: lease lost before the ack; outcome %s discarded",
                             job.id, job.kind, decision.label)
                    return
                except StoreUnavailable as exc:
                    if time.monotonic() + delay > give_up_at or self._threads_stop.is_set():
                        log.error("job %s: ack (%s) failed, store unavailable: %s; the lease "
                                  "will expire and the reclaimer will retry it",
                                  job.id, decision.label, exc)
                        return
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                except InvalidInput as exc:
                    if decision.outcome is Outcome.RETRY:
                        log.error("job %s: ack rejected: %s", job.id, exc)
                        return
                    decision = Decision(Outcome.RETRY, f"invalid outcome from handler: {exc}",
                                        logs=decision.logs)
        finally:
            self._done_with(attempt)

    def _log_outcome(self, attempt: _Attempt, decision: Decision) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        job = attempt.job
        elapsed_ms = int((time.monotonic() - attempt.started) * 1000)
        label = decision.label
        if decision.outcome is Outcome.RETRY and job.attempt + 1 >= job.max_attempts:
            label += " (attempts exhausted: archived)"
        detail = f": {decision.error.splitlines()[0]}" if decision.error else ""
        if decision.delay_ms is not None and decision.outcome is not Outcome.SUCCESS:
            detail += f" (delay {decision.delay_ms} ms)"
        log.info("job %s %s run %d: %s in %d ms%s", job.id, job.kind, attempt.claim.fence,
                 label, elapsed_ms, detail)

    # -- leases and timeouts ----------------------------------------------------------------
    def _all_attempts(self) -> list[_Attempt]:
        with self._lock:
            return list(self._inflight.values())

    def _unsettled(self) -> list[_Attempt]:
        return [a for a in self._all_attempts() if not a.settled]

    def _abandon(self, attempt: _Attempt, reason: str) -> None:
        """The store no longer lets this attempt write: tell the handler, write nothing."""
        attempt.gate.close(reason)
        if attempt.settle():
            log.warning("job %s %s: %s; handler cancelled, its outcome will be discarded",
                        attempt.job.id, attempt.job.kind, reason)
            self._done_with(attempt)

    def _keeper_loop(self) -> None:
        interval = max(self.lease_ms / 3000, 0.01)
        next_renew = time.monotonic() + interval
        while not self._threads_stop.is_set():
            now = time.monotonic()
            self._enforce_time_limits(now)
            if now >= next_renew:
                ok = self._renew()
                next_renew = now + (interval if ok else min(interval, 0.5))
            # Nothing in flight: nothing to time out or renew until a dispatch wakes us.
            tick = 0.05 if self._all_attempts() else 1.0
            wait = min(tick, max(0.0, next_renew - time.monotonic()))
            self._keeper_wake.wait(wait)
            self._keeper_wake.clear()

    def _enforce_time_limits(self, now: float) -> None:
        for attempt in self._unsettled():
            gate = attempt.gate
            if attempt.timeout_at is not None and now >= attempt.timeout_at \
                    and gate.cancel(TIMED_OUT):
                attempt.cancelled_at = now
                log.warning("job %s %s: timed out after %d ms; cancelling", attempt.job.id,
                            attempt.job.kind, attempt.timeout_ms)
            if attempt.deadline_at is not None and now >= attempt.deadline_at \
                    and gate.cancel(DEADLINE):
                attempt.cancelled_at = now
                log.warning("job %s %s: deadline reached while running; cancelling",
                            attempt.job.id, attempt.job.kind)
            if (
                gate.reason in (TIMED_OUT, DEADLINE) and not attempt.isolated
                and attempt.cancelled_at is not None and not attempt.thread_done
                and now >= attempt.cancelled_at + self.timeout_grace_ms / 1000
            ):
                log.error("job %s %s: handler ignored cancellation for %d ms; recording the "
                          "attempt now, its thread stays busy until the handler returns",
                          attempt.job.id, attempt.job.kind, self.timeout_grace_ms)
                threading.Thread(target=self._finish, args=(attempt, Decision(Outcome.RETRY)),
                                 daemon=True).start()
            if now > attempt.lease_ok_until and attempt.settle():
                # Renewals kept failing: another worker may own the job by now. Stop the
                # handler; hand the job back in case nobody reclaimed it yet (a no-op
                # for the store otherwise), so the outage is not charged as a crash.
                attempt.gate.close(LEASE_EXPIRED)
                log.warning("job %s %s: %s; handler cancelled, outcome will be discarded",
                            attempt.job.id, attempt.job.kind, LEASE_EXPIRED)
                threading.Thread(target=self._release, args=([attempt], 0.0, True),
                                 daemon=True).start()

    def _renew(self) -> bool:
        # Attempts whose ack is queued are renewed too: under load or a store hiccup the
        # ack may wait, and the lease must not run out meanwhile.
        live = [a for a in self._all_attempts() if not a.finished and not a.gate.closed]
        if not live:
            return True
        started = time.monotonic()
        try:
            lost = set(self.store.renew([a.claim for a in live], self.lease_ms))
        except Exception as exc:  # noqa: BLE001 - StoreUnavailable and friends
            log.warning("lease renewal failed (%d job(s)): %s", len(live), exc)
            return False
        until = started + self.lease_ms / 1000
        for attempt in live:
            if attempt.job.id in lost:
                if not attempt.settled:  # a queued ack learns it from the store itself
                    self._abandon(attempt, NOT_OURS)
            else:
                attempt.lease_ok_until = until
        return True

    def _release(self, attempts: list[_Attempt], retry_for_s: float,
                 already_settled: bool = False) -> int:
        mine = []
        for attempt in attempts:
            # Settle first: if the handler just finished, its ack wins and we leave it.
            if already_settled or attempt.settle():
                attempt.gate.close(RELEASED)
                mine.append(attempt)
        if not mine:
            return 0
        give_up = time.monotonic() + retry_for_s
        released = len(mine)
        while True:
            try:
                self.store.release([a.claim for a in mine])
                break
            except StoreUnavailable as exc:
                if time.monotonic() >= give_up:
                    log.error("release of %d job(s) failed: %s; their leases will expire",
                              len(mine), exc)
                    released = 0
                    break
                time.sleep(0.1)
            except Exception as exc:  # noqa: BLE001
                log.error("release of %d job(s) failed: %s", len(mine), exc)
                released = 0
                break
        for attempt in mine:
            self._done_with(attempt)
        return released

    # -- heartbeat and signals --------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._threads_stop.is_set():
            self._heartbeat_once()
            self._hb_wake.wait(self.heartbeat_ms / 1000)
            self._hb_wake.clear()

    def _row(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id, "host": _HOST, "pid": os.getpid(),
            "queues": list(self.queues), "concurrency": self.concurrency,
            "inflight": 0 if self._stopped else self.inflight, "polls": self.polls,
            "empty_polls": self.empty_polls, "started_at_ms": self.started_at_ms,
            "status": self.status,
        }

    def _heartbeat_once(self) -> None:
        snapshot = {a.job.id: a for a in self._unsettled()}
        try:
            reply = self.store.heartbeat(self._row(), list(snapshot))
        except Exception as exc:  # noqa: BLE001 - keep beating; the store may come back
            log.warning("heartbeat failed: %s", exc)
            return
        for job_id in reply.get("cancelled") or ():
            attempt = snapshot.get(job_id)
            if attempt is not None and not attempt.settled:
                self._abandon(attempt, NOT_OURS)
        signal = reply.get("signal")
        if signal and not self._stopped:
            self._apply_signal(signal)

    def _apply_signal(self, signal: str) -> None:
        log.info("worker %s: operator signal %s", self.worker_id, signal)
        if signal == "quiet":
            self._quiet = True
        elif signal == "resume":
            self._quiet = False
            self._notify("control")
        elif signal == "restart":
            self._request_stop(EXIT_RESTART, STATUS_RESTARTING)
        elif signal == "terminate":
            self._request_stop(EXIT_OK, STATUS_STOPPING)
        elif signal == "resign":
            if self._duty_runner is not None and self.duties:
                self._duty_runner.resign(self.resign_cooldown_ms)
        else:
            log.warning("worker %s: unknown signal %r ignored", self.worker_id, signal)
        self._hb_wake.set()  # acknowledge the new status at once


_HOST = socket.gethostname()


def default_worker_id() -> str:
    """``host:pid:random``: readable in the dashboard, unique across restarts."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _deadline_wall_ms(job: Job, deadline_ms: int | None) -> int | None:
    header = (job.headers or {}).get(DEADLINE_HEADER)
    if header:
        try:
            return int(header)
        except ValueError:
            log.warning("job %s: ignoring malformed %s header %r", job.id, DEADLINE_HEADER,
                        header)
    if deadline_ms is not None:
        return job.enqueued_at_ms + deadline_ms
    return None
