"""The handler threads: decode, set time limits, call the handler, queue the decision.

``concurrency`` threads share one queue of dispatched attempts, so an idle thread is a
free slot and the dispatcher never admits more jobs than threads are idle. An attempt
takes its thread from the moment it is dispatched (even before a thread picks it up)
until its handler returns — a handler that ignores its timeout keeps its thread, and so
its slot, after the attempt was recorded.

The payload is decoded here, in the parent, even for isolated handlers: an undecodable
job never costs a child process.

A handler that returns an awaitable (an ``async def``, or a plain function returning a
coroutine) has it awaited to the end on the worker's event loop (``aio``) while its pool
thread waits: the coroutine holds the slot, as a plain handler does.
"""

from __future__ import annotations

import functools
import inspect
import logging
import queue
import time
from collections.abc import Callable, Sequence
from typing import Any

from headgate.core import Claim, Job, Outcome
from headgate.store.port import Admission

from . import isolation
from .acks import AckQueue
from .aio import EventLoopThread
from .attempts import Attempt, Inflight
from .execution import Decision, error_text, from_exception, from_value
from .handlers import HandlerSpec, handler_ref
from .job_context import JobContext, LogCapture, job_logger
from .observe import AttemptHook, attempt_scope
from .outcomes import JobOutcome, Undecodable

log = logging.getLogger("headgate.worker")
job_log = logging.getLogger("headgate.job")

# A job header naming an absolute deadline (epoch ms); wins over the handler option.
DEADLINE_HEADER = "deadline_at_ms"
# Weight of the newest attempt in the running average of attempt durations.
TYPICAL_WEIGHT = 0.2


class Pool:
    def __init__(
        self, store: Admission, inflight: Inflight, acks: AckQueue,
        handlers: dict[str, HandlerSpec], *, worker_id: str, concurrency: int,
        timeout_ms: int | None, deadline_ms: int | None, isolated: bool,
        kill_grace_ms: int, max_log_lines: int, job_log_level: int, preload: list[str],
        on_time_limit: Callable[[], None], on_slot: Callable[[], None],
        aio: EventLoopThread, hooks: Sequence[AttemptHook] = (),
    ) -> None:
        self.store = store
        self.inflight = inflight
        self.acks = acks
        self.handlers = handlers
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.timeout_ms = timeout_ms
        self.deadline_ms = deadline_ms
        self.isolated = isolated
        self.kill_grace_ms = kill_grace_ms
        self.max_log_lines = max_log_lines
        self.job_log_level = job_log_level
        self.preload = preload
        self.on_time_limit = on_time_limit
        self.on_slot = on_slot
        self.aio = aio
        self.hooks = list(hooks)
        self._work: queue.SimpleQueue[Attempt | None] = queue.SimpleQueue()
        # How long an attempt typically takes from dispatch to its decision (a running
        # average the dispatcher reads to decide whether to wait for more acks).
        self.typical_s = 0.0

    def submit(self, claims: list[Claim], lease_ok_until: float) -> None:
        for claim in claims:
            attempt = Attempt(claim, self.handlers.get(claim.job.kind), lease_ok_until)
            self.inflight.add(attempt)
            self._work.put(attempt)

    def stop(self) -> None:
        """Each thread ends after the attempt it is running (if any)."""
        for _ in range(self.concurrency):
            self._work.put(None)

    def run(self) -> None:
        """One pool thread."""
        while True:
            attempt = self._work.get()
            if attempt is None:
                return
            queued = False
            try:
                with attempt_scope(attempt.job, self.worker_id, self.hooks) as finish:
                    try:
                        decision = self._run(attempt)
                    except BaseException as exc:  # noqa: BLE001 - e.g. SystemExit
                        decision = from_exception(exc, attempt.job)
                    finish(decision)
                self._observe(time.monotonic() - attempt.started)
                # Free the slot before queueing the ack: the dispatcher turn that writes
                # the ack can then fill the slot in the same transaction.
                self.inflight.thread_free(attempt)
                queued = self.acks.finish(attempt, decision)
            except Exception:  # noqa: BLE001 - keep the pool thread alive
                log.exception("job %s: unexpected failure finishing the attempt", attempt.job.id)
            finally:
                if not attempt.thread_done:
                    self.inflight.thread_free(attempt)
            if not queued:
                self.on_slot()  # no ack will wake the dispatcher for this slot

    def _observe(self, took_s: float) -> None:
        """Unlocked: two threads racing lose one sample of an average."""
        typical = self.typical_s
        self.typical_s = took_s if typical == 0 else typical + TYPICAL_WEIGHT * (took_s - typical)

    def _run(self, attempt: Attempt) -> Decision:
        job, spec = attempt.job, attempt.spec
        if spec is None:
            return Decision(Outcome.UNDECODABLE,
                            f"no handler for kind {job.kind!r} on worker {self.worker_id}")
        deadline_ms = deadline_wall_ms(job, spec.deadline_ms or self.deadline_ms)
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
        timeout_ms = spec.timeout_ms or self.timeout_ms
        now = time.monotonic()
        if timeout_ms is not None:
            attempt.timeout_ms = timeout_ms
            attempt.timeout_at = now + timeout_ms / 1000
        ends = [t for t in (attempt.timeout_at, attempt.deadline_at) if t is not None]
        deadline = min(ends) if ends else None
        if ends:
            self.on_time_limit()  # the lease keeper may be asleep for up to a second
        if spec.runs_isolated(self.isolated):
            # The child's log lines arrive through the capture.
            capture = self._capture(attempt)
            ctx = JobContext(self.store, attempt.claim, payload, attempt.gate,
                             job_logger(job, capture, self.job_log_level), self.worker_id,
                             deadline)
            attempt.ctx = ctx
            attempt.isolated = True

            def on_process(process: Any) -> None:
                attempt.process = process

            return isolation.run_isolated(
                handler_ref(spec.fn), ctx, capture, self.kill_grace_ms / 1000,
                self.preload, on_process, self.job_log_level,
            )
        ctx = JobContext(self.store, attempt.claim, payload, attempt.gate,
                         functools.partial(self._logger, attempt), self.worker_id, deadline)
        attempt.ctx = ctx
        try:
            value = spec.fn(job, ctx)
            if inspect.isawaitable(value):
                value = self.aio.run(value, attempt.gate)
        except JobOutcome as outcome:
            return from_exception(outcome, job)
        except Exception as exc:  # noqa: BLE001 - any other exception is a retry
            return from_exception(exc, job)
        return from_value(value, job, ctx.result, ctx.result_schema_version)

    def _capture(self, attempt: Attempt) -> LogCapture:
        capture = LogCapture(self.max_log_lines, forward_to=job_log)
        attempt.capture = capture
        return capture

    def _logger(self, attempt: Attempt) -> logging.Logger:
        """Built on the handler's first use of ``ctx.logger``."""
        return job_logger(attempt.job, self._capture(attempt), self.job_log_level)


def deadline_wall_ms(job: Job, deadline_ms: int | None) -> int | None:
    """When the job stops being worth running (epoch ms), or None."""
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
