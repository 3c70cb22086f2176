"""The worker runtime's public face: ``Worker`` — settings, handler
registration, and run / start / stop / abort.

What happens while it runs lives beside it: ``engine`` (the threads and the shutdown
sequence), ``dispatcher`` (acks then admission, one writer thread), ``pool`` (handler
threads, time limits), ``acks`` (recording outcomes in batches), ``leases`` (renewal,
timeouts, release), ``heartbeat`` (registry row, operator signals and cancels),
``attempts`` (how an attempt ends exactly once) and ``control`` (stop state, statuses,
exit codes). The settings are one frozen ``WorkerConfig`` (``worker_config``), the
registrations ``HandlerSpec`` values (``handlers``); ``Engine`` is built from those two,
not from the ``Worker``.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from headgate.core import InvalidInput
from headgate.core.clock import wall_ms
from headgate.store.port import Store

from .decoders import Decoder
from .default_duties import DEFAULT_RESIGN_COOLDOWN_MS, WorkerDuties, worker_duty_runner
from .engine import Engine
from .handlers import Handler, HandlerSpec, check_handler, isolated_modules
from .heartbeat import default_worker_id
from .job_context import DEFAULT_MAX_LOG_LINES
from .observe import AttemptHook
from .pool import DEADLINE_HEADER
from .run_state import (
    EXIT_FORCED,
    EXIT_OK,
    EXIT_RESTART,
    STATUS_STOPPING,
    Control,
)
from .signals import install_signal_handlers
from .worker_config import MIN_LEASE_MS, WorkerConfig, positive_ms

log = logging.getLogger("headgate.worker")

__all__ = [
    "DEADLINE_HEADER", "EXIT_FORCED", "EXIT_OK", "EXIT_RESTART", "MIN_LEASE_MS", "Handler",
    "HandlerSpec", "Worker", "WorkerConfig", "check_handler", "default_worker_id",
]


def _setting(name: str, doc: str) -> property:
    """A read-only view of one field of the worker's config (``worker.lease_ms``)."""
    return property(lambda self: getattr(self.config, name), doc=doc)


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
    - ``duties`` (default ``True``): the maintenance duties a fleet of workers needs
      without a server — reclaimer, promoter, scheduler, retention, worker aging,
      history (``worker.duties.WORKER_DUTIES``; why these: ``headgate.worker.default_duties``)
      — run in this process under singleton duty leases, so each runs in one process
      of the fleet. ``False`` runs none (a server or another process carries them); a
      list of names runs those. ``duty_runner`` replaces the default runner.
    - ``isolated=True`` runs every handler (unless it says otherwise) in a child process.
    - ``poll_floor_ms`` / ``poll_ceiling_ms``: empty-poll backoff. ``probe_interval_ms``:
      how often the cheap change probe is consulted between polls; after
      ``idle_after_ms`` without work it relaxes to ``idle_probe_interval_ms`` (each
      consultation is a thread wake-up: every 2 ms costs ~2.5% of a core, every 20 ms
      ~0.3%; a busy worker reacts in ~2 ms, a long-idle one within ~20 ms).
    - ``log_on_success``: also record captured log lines for successful attempts
      (default: only attempts that did not succeed carry their logs into the history).

    Handlers are plain functions or ``async def`` coroutine functions, ``fn(job, ctx)``
    either way (a plain function returning an awaitable has it awaited too). A
    coroutine runs to completion on the worker's one event loop, started on its own
    thread with the first coroutine, while the pool thread that took the job waits for
    it — so it holds a ``concurrency`` slot like a plain handler, and timeouts,
    deadlines, operator cancel, lost leases and shutdown cancel its task
    (``CancelledError`` at its next ``await``). One loop per worker, not per thread, so
    coroutines can share loop-bound clients; a coroutine that blocks stalls the others,
    so blocking work belongs in ``asyncio.to_thread`` or a plain handler. Exceptions,
    outcomes, ``ctx.logger`` lines, progress and results are recorded as for plain
    handlers; a coroutine that did not run to its end is never a success. Isolated
    handlers may be ``async def`` too (awaited in the child). Details:
    ``headgate.worker.aio``.
    """

    #: This worker awaits ``async def`` handlers (layers built on it can check).
    runs_coroutines = True

    config: WorkerConfig
    _started = False

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
        duties: bool | Iterable[str] = True,
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
        self._handlers: dict[str, HandlerSpec] = {}
        self.attempt_hooks: list[AttemptHook] = []
        self._duty_runner = duty_runner
        self.config = WorkerConfig.build(
            worker_id or default_worker_id(), queues=queues, concurrency=concurrency,
            lease_ms=lease_ms, heartbeat_ms=heartbeat_ms, drain_ms=drain_ms,
            timeout_ms=timeout_ms, deadline_ms=deadline_ms,
            timeout_grace_ms=timeout_grace_ms, kill_grace_ms=kill_grace_ms,
            isolated=isolated, duties=duties, duty_interval_ms=duty_interval_ms,
            resign_cooldown_ms=resign_cooldown_ms, poll_floor_ms=poll_floor_ms,
            poll_ceiling_ms=poll_ceiling_ms, probe_interval_ms=probe_interval_ms,
            idle_probe_interval_ms=idle_probe_interval_ms, idle_after_ms=idle_after_ms,
            hint_ceiling_ms=hint_ceiling_ms, quantum=quantum, max_log_lines=max_log_lines,
            job_log_level=job_log_level, log_on_success=log_on_success,
        )
        self._control = Control()
        self._engine: Engine | None = None
        self._drain_override: int | None = None
        self._started = False
        self._done = threading.Event()
        self._bg_thread: threading.Thread | None = None
        self.started_at_ms = 0

    # -- configuration ------------------------------------------------------------------
    def configure(
        self, *, queues: Sequence[str] | None = None, concurrency: int | None = None,
        lease_ms: int | None = None, drain_ms: int | None = None,
        timeout_ms: int | None = None, deadline_ms: int | None = None,
        isolated: bool | None = None, duties: bool | Iterable[str] | None = None,
        worker_id: str | None = None,
    ) -> Worker:
        """Change settings before ``run``/``start`` (the CLI's overrides use this): a new
        ``WorkerConfig`` with the given (not ``None``) settings replaces the old one,
        checked whole, so a refused change leaves the old one in place."""
        if self._started:
            raise RuntimeError("configure() must be called before the worker starts")
        self.config = self.config.replace(
            queues=queues, concurrency=concurrency, lease_ms=lease_ms, drain_ms=drain_ms,
            timeout_ms=timeout_ms, deadline_ms=deadline_ms, isolated=isolated,
            duties=duties, worker_id=worker_id)
        return self

    worker_id = _setting("worker_id", "This worker's id in the registry.")
    @property
    def queues(self) -> list[str]:
        """The queues it admits from, in order."""
        return list(self.config.queues)

    concurrency = _setting("concurrency", "Handler threads, so jobs at once.")
    lease_ms = _setting("lease_ms", "How long a claim holds between renewals.")
    drain_ms = _setting("drain_ms", "How long shutdown waits for in-flight work.")
    timeout_ms = _setting("timeout_ms", "Per-attempt time limit (None: none).")
    deadline_ms = _setting("deadline_ms", "A job's worth after its enqueue (None: none).")
    isolated = _setting("isolated", "Handlers run in child processes by default.")
    duties = _setting("duties", "The maintenance duties this worker runs.")

    def add_attempt_hook(self, hook: AttemptHook) -> None:
        """Observe every attempt (tracing, metrics): see ``headgate.worker.observe``."""
        if self._started:
            raise RuntimeError("attempt hooks must be added before the worker starts")
        if not callable(hook):
            raise TypeError("an attempt hook is callable as hook(job, worker_id)")
        self.attempt_hooks.append(hook)

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
        spec = HandlerSpec.of(kind, fn, decoder=decoder,
                              timeout_ms=positive_ms("timeout_ms", timeout_ms),
                              deadline_ms=positive_ms("deadline_ms", deadline_ms),
                              isolated=isolated)
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
    def run(self, *, duties: bool | Iterable[str] | None = None) -> int:
        """Work until stopped by ``stop()``, a ``terminate``/``restart`` signal,
        SIGTERM or Ctrl-C; returns the exit code (0, or ``EXIT_RESTART`` after
        ``restart``). ``duties`` overrides the worker's setting (``run(duties=False)``
        when something else runs them). In the main thread of a process that left
        SIGTERM at its default, SIGTERM and SIGINT drain as under ``headgate worker``
        (a second one releases and exits at once) until ``run`` returns."""
        if duties is not None:
            self.configure(duties=duties)
        restore = self._drain_on_signals()
        try:
            return self._run()
        finally:
            for signum, handler in restore.items():
                signal.signal(signum, handler)

    def _drain_on_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread() \
                or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return {}
        previous: dict[int, Any] = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        install_signal_handlers(self, None)
        return previous

    def _run(self) -> int:
        engine = self._begin()
        try:
            while not self._control.stop_requested.wait(0.2):
                pass
        except KeyboardInterrupt:
            log.info("interrupted; draining (interrupt again to release and stop now)")
            self._control.stop_requested.set()
        try:
            drain_ms = self.drain_ms if self._drain_override is None else self._drain_override
            code = engine.shutdown(drain_ms)
        except KeyboardInterrupt:
            self.abort()
            raise
        self._done.set()
        return code

    def start(self, *, duties: bool | Iterable[str] | None = None) -> Worker:
        """Run in a background thread (embedding, tests). ``stop()`` ends it.
        ``duties`` as for ``run``."""
        if duties is not None:
            self.configure(duties=duties)
        self._bg_thread = threading.Thread(target=self._run_bg, name="headgate-worker",
                                           daemon=True)
        self._bg_thread.start()
        return self

    def _run_bg(self) -> None:
        try:
            self.run()
        except Exception:  # noqa: BLE001 - reported through join()'s exit code
            log.exception("worker %s crashed", self.worker_id)
            self._control.exit_code = EXIT_FORCED
            self._done.set()

    def stop(self, drain_ms: int | None = None, *, wait: bool = True,
             timeout: float | None = None) -> int | None:
        """Stop admitting, drain in-flight work for up to ``drain_ms`` (default: the
        worker's), release the rest. With ``wait`` (and the worker running in another
        thread), block until done and return the exit code."""
        if drain_ms is not None:
            self._drain_override = drain_ms
        self._control.request_stop(EXIT_OK, STATUS_STOPPING)
        if wait and threading.current_thread() is not self._bg_thread:
            return self.join(timeout)
        return None

    def join(self, timeout: float | None = None) -> int | None:
        if not self._done.wait(timeout):
            return None
        return self._control.exit_code

    @property
    def status(self) -> str:
        return self._control.status

    @property
    def inflight(self) -> int:
        return 0 if self._engine is None else self._engine.inflight.count()

    @property
    def polls(self) -> int:
        return 0 if self._engine is None else self._engine.dispatcher.polls

    @property
    def empty_polls(self) -> int:
        return 0 if self._engine is None else self._engine.dispatcher.empty_polls

    def abort(self) -> int:
        """Emergency stop (a second SIGTERM): release every unfinished claim now and
        kill isolated children; returns how many claims were released. The caller
        exits the process."""
        self._control.stop_requested.set()
        self._control.stopping.set()
        return 0 if self._engine is None else self._engine.abort()

    def _begin(self) -> Engine:
        if self._started:
            raise RuntimeError("a Worker runs once; create a new one")
        config, handlers = self.config, dict(self._handlers)
        # Before anything starts: a handler the child cannot import refuses the start.
        preload = isolated_modules(handlers, config.isolated)
        self._started = True
        if not handlers:
            log.warning("worker %s has no handlers: every job it admits is undecodable",
                        config.worker_id)
        self.started_at_ms = wall_ms()
        if config.duties and self._duty_runner is None:
            self._duty_runner = worker_duty_runner(self.store, config.worker_id,
                                                   config.duty_interval_ms,
                                                   duties=config.duties)
        engine = Engine(self.store, config, handlers, self._control,
                        self._duty_runner if config.duties else None,
                        hooks=tuple(self.attempt_hooks), preload=preload,
                        started_at_ms=self.started_at_ms)
        self._engine = engine
        log.info(
            "worker %s starting: queues=%s concurrency=%d lease_ms=%d kinds=%s%s%s",
            config.worker_id, ",".join(config.queues), config.concurrency, config.lease_ms,
            ",".join(self.kinds) or "-",
            f" duties={','.join(config.duties)}" if config.duties else " no-duties",
            " isolated" if config.isolated else "",
        )
        engine.start()
        return engine
