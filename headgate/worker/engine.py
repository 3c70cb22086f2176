"""One run of a ``Worker``: its threads, how they are wired, and how they stop.

Threads, all daemons (a handler stuck in C code must never keep the process alive after
shutdown has released its job):

- **dispatcher** — writes the queued acks, then admits for the free capacity
  (``dispatcher``);
- **pool** — ``concurrency`` threads running handlers (``pool``); a finished handler
  queues its decision for the dispatcher (``acks``) and takes the next job;
- **lease keeper** — renews every in-flight lease in one call every ``lease_ms / 3``,
  enforces timeouts and deadlines (``leases``);
- **heartbeat** — upserts the registry row, applies operator signals and cancels
  (``heartbeat``);
- **asyncio** (from the first coroutine handler on) — the worker's event loop (``aio``);
- **duties** (on by default) — the maintenance duties under singleton duty leases, on
  APScheduler's threads (``duties``).

They share the table of attempts (``attempts``) and the stop state (``control``).

Shutdown drains: admission stops, in-flight handlers get ``drain_ms`` to finish while
their leases keep being renewed, whatever is left is released (back to available,
nothing charged) and its handlers told to stop, acks already decided are written,
released in-thread handlers get ``RELEASED_RETURN_S`` to return, then the threads end
and a last heartbeat marks the worker stopped.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from headgate.core.records import WorkerBeat
from headgate.store.port import Admission

from . import isolation
from .acks import AckQueue
from .aio import EventLoopThread
from .attempts import Inflight
from .default_duties import WorkerDuties
from .dispatcher import Dispatcher, Doorbell
from .handlers import HandlerSpec
from .heartbeat import HOST, Heartbeat
from .leases import LeaseKeeper
from .observe import AttemptHook
from .polling import change_probe
from .pool import Pool
from .run_state import Control
from .worker_config import WorkerConfig

log = logging.getLogger("headgate.worker")
# How long an in-thread handler whose job shutdown released (its ctx.cancelled set) gets
# to return, for its cleanup, before the process exits without it.
RELEASED_RETURN_S = 1.0


class Engine:
    """Built when a worker starts from its ``WorkerConfig`` and its handlers (the
    ``Worker`` itself is not needed here); both are fixed from then on. ``preload``: the
    modules of the isolated handlers (``handlers.isolated_modules``)."""

    def __init__(self, store: Admission, config: WorkerConfig,
                 handlers: Mapping[str, HandlerSpec], control: Control,
                 duty_runner: WorkerDuties | None, *, hooks: Sequence[AttemptHook] = (),
                 preload: Sequence[str] = (), started_at_ms: int = 0) -> None:
        self.store = store
        self.config = config
        self.control = control
        self.duty_runner = duty_runner
        self.started_at_ms = started_at_ms
        self.inflight = inflight = Inflight()
        self.doorbell = doorbell = Doorbell()
        self.preload = list(preload)
        self.acks = AckQueue(
            store, inflight, lease_ms=config.lease_ms, log_on_success=config.log_on_success,
            halted=control.halted, on_queued=lambda: doorbell.ring("ack"),
        )
        self.keeper = LeaseKeeper(
            store, inflight, lease_ms=config.lease_ms,
            timeout_grace_ms=config.timeout_grace_ms, kill_grace_ms=config.kill_grace_ms,
            halted=control.halted,
            record=self.acks.finish,
        )
        self.aio = EventLoopThread()
        self.pool = Pool(
            store, inflight, self.acks, dict(handlers), worker_id=config.worker_id,
            concurrency=config.concurrency, timeout_ms=config.timeout_ms,
            deadline_ms=config.deadline_ms, isolated=config.isolated,
            kill_grace_ms=config.kill_grace_ms, max_log_lines=config.max_log_lines,
            job_log_level=config.job_log_level, preload=self.preload,
            on_time_limit=self.keeper.wake, on_slot=lambda: doorbell.ring("slot"),
            aio=self.aio, hooks=hooks,
        )
        self.dispatcher = Dispatcher(
            store, inflight, self.acks, self.pool, control, doorbell, change_probe(store),
            self.keeper.give_back, worker_id=config.worker_id, queues=config.queues,
            concurrency=config.concurrency, lease_ms=config.lease_ms, quantum=config.quantum,
            poll_floor_ms=config.poll_floor_ms, poll_ceiling_ms=config.poll_ceiling_ms,
            probe_interval_ms=config.probe_interval_ms,
            idle_probe_interval_ms=config.idle_probe_interval_ms,
            idle_after_ms=config.idle_after_ms, hint_ceiling_ms=config.hint_ceiling_ms,
        )
        resign = None
        if duty_runner is not None:
            resign = functools.partial(duty_runner.resign, config.resign_cooldown_ms)
        self.heartbeat = Heartbeat(
            store, inflight, control, worker_id=config.worker_id,
            interval_ms=config.heartbeat_ms, row=self._row, resign=resign,
        )
        control.listen(lambda: doorbell.ring("control"))
        control.listen(self.heartbeat.wake)
        self._threads: list[threading.Thread] = []
        self._unsubscribe: Callable[[], None] | None = None

    def _row(self) -> WorkerBeat:
        config = self.config
        return WorkerBeat(
            config.worker_id, host=HOST, pid=os.getpid(), queues=tuple(config.queues),
            concurrency=config.concurrency,
            inflight=0 if self.control.stopped else self.inflight.count(),
            polls=self.dispatcher.polls, empty_polls=self.dispatcher.empty_polls,
            started_at_ms=self.started_at_ms, status=self.control.status)

    def _on_activity(self, queues: frozenset[str]) -> None:
        if not queues or not queues.isdisjoint(self.dispatcher.queues):
            self.doorbell.ring("activity")

    def start(self) -> None:
        if self.preload:
            isolation.mp_context(self.preload)
        self._unsubscribe = self.store.activity.subscribe(self._on_activity)
        self._spawn(self.heartbeat.run, "headgate-heartbeat")
        self._spawn(self.keeper.run, "headgate-leases")
        for i in range(self.config.concurrency):
            self._spawn(self.pool.run, f"headgate-pool-{i}")
        self._spawn(self.dispatcher.run, "headgate-dispatch")
        if self.duty_runner is not None:
            self.duty_runner.start()

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def shutdown(self, drain_ms: int) -> int:
        """Drain, release, stop the threads; returns the exit code."""
        control, inflight, worker_id = self.control, self.inflight, self.config.worker_id
        with self.dispatcher.handoff:  # an admit still in progress hands its claims back
            control.stopping.set()
        control.changed()
        log.info("worker %s %s: draining %d in-flight job(s) for up to %d ms", worker_id,
                 control.stop_status, inflight.count(), drain_ms)
        deadline = time.monotonic() + drain_ms / 1000
        while inflight.unsettled() and time.monotonic() < deadline:
            time.sleep(0.02)
        leftovers = inflight.unsettled()
        if leftovers:
            released = self.keeper.release(leftovers, retry_for_s=5.0)
            log.info("worker %s: released %d unfinished job(s) without charging an attempt",
                     worker_id, released)
        # Let the dispatcher write the acks already decided; give isolated children
        # their SIGTERM grace and released in-thread handlers RELEASED_RETURN_S to
        # return. Past that, in-thread handlers are daemons and are not waited for.
        now = time.monotonic()
        settle_deadline = now + self.config.kill_grace_ms / 1000 + 1
        return_deadline = now + (RELEASED_RETURN_S if leftovers else 0)
        while time.monotonic() < settle_deadline and any(
            a.acking or (a.process is not None and a.process.is_alive())
            or (not a.thread_done and not a.isolated and time.monotonic() < return_deadline)
            for a in inflight.all()
        ):
            time.sleep(0.02)
        self.pool.stop()
        self.aio.stop()  # what still runs there was released above
        if self.duty_runner is not None:
            self.duty_runner.stop()
        control.halted.set()
        self.keeper.wake()
        control.changed()
        for thread in self._threads:
            if thread.name in ("headgate-dispatch", "headgate-leases", "headgate-heartbeat"):
                thread.join(timeout=10)
        if self._unsubscribe is not None:
            self._unsubscribe()
        control.stopped = True
        self.heartbeat.beat()
        log.info("worker %s stopped (exit code %d)", worker_id, control.exit_code)
        return control.exit_code

    def abort(self) -> int:
        """Write the acks already decided, release every unsettled claim now and kill
        isolated children; returns how many claims were released."""
        for attempt in self.inflight.all():
            if attempt.process is not None and attempt.process.is_alive():
                attempt.process.kill()
        # On a thread of its own: this may run in a signal handler that interrupted the
        # main thread in the middle of one of its own store transactions.
        result: list[int] = []

        def finish_now() -> None:
            # Finished work is not re-run: its acks (ours, or the dispatcher's batch in
            # flight) get a moment, as releases do.
            give_up = time.monotonic() + 1.0
            while time.monotonic() < give_up:
                self.acks.write(self.acks.take())
                if not any(a.acking for a in self.inflight.all()):
                    break
                time.sleep(0.02)
            result.append(self.keeper.release(self.inflight.unsettled(), retry_for_s=2.0))

        helper = threading.Thread(target=finish_now, name="headgate-abort", daemon=True)
        helper.start()
        helper.join(timeout=3.0)
        return result[0] if result else 0
