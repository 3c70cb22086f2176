"""What a handler holds while it runs: the job context and its per-attempt write gate.

Every store write a handler makes (progress, output) carries the claim's fence, so the
store refuses it once the attempt is superseded. The gate adds the worker's side of
that contract: once the worker knows the attempt is over for it (lease lost, operator
cancel, released at shutdown, acked after a timeout), later writes are dropped here
without touching the store, and the handler is told through ``cancelled``.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from headgate.core import Claim, InvalidInput, Job, LeaseLost, StoreUnavailable
from headgate.core.envelope import MAX_PAYLOAD
from headgate.store.port import Admission

T = TypeVar("T")

MAX_PROGRESS_MESSAGE = 512
DEFAULT_MAX_LOG_LINES = 50
MAX_LOG_LINE = 1024
# Progress and output are reports, not the work: a short retry rides out a locked
# database, a longer outage must not stall the handler that is doing the work.
WRITE_RETRY_DELAYS_S = (0.05, 0.1, 0.25)

log = logging.getLogger("headgate.worker")


class AttemptGate:
    """Cancellation and write permission for one attempt, shared by handler and worker.

    ``cancel`` asks the handler to stop (it may still write: the lease is still ours,
    e.g. a timeout within its grace). ``close`` additionally forbids writes: the
    attempt no longer owns the job.
    """

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.reason: str | None = None
        self.closed = False
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def cancel(self, reason: str) -> bool:
        """Set the first reason and the event; False when already cancelled."""
        with self._lock:
            first = self.reason is None
            if first:
                self.reason = reason
        self.cancelled.set()
        if first:
            self._notify()
        return first

    def close(self, reason: str) -> None:
        with self._lock:
            first = not self.closed
            self.closed = True
            if self.reason is None:
                self.reason = reason
        self.cancelled.set()
        if first:  # again after a cancel: a coroutine may have swallowed the first
            self._notify()

    def on_cancel(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` (from the cancelling thread) on cancel and on close; at once
        when the attempt is already cancelled. How a coroutine's task is cancelled."""
        with self._lock:
            self._listeners.append(fn)
            already = self.reason is not None
        if already:
            fn()

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn()
            except Exception:  # noqa: BLE001 - a listener must not stop the canceller
                log.exception("cancel listener failed")


class LogCapture(logging.Handler):
    """Keeps the last ``max_lines`` formatted records of one attempt for its history,
    and forwards each record to ``forward_to`` when that logger would emit it, so job
    logs also reach the process's normal logging without double-counting levels."""

    def __init__(self, max_lines: int = DEFAULT_MAX_LOG_LINES,
                 forward_to: logging.Logger | None = None) -> None:
        super().__init__(logging.NOTSET)
        self.max_lines = max_lines
        self.forward_to = forward_to
        self._lines: collections.deque[str] = collections.deque(maxlen=max_lines)
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.levelname} {record.getMessage()}"
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                text += f" [{type(exc).__name__}: {exc}]"
        except Exception:  # noqa: BLE001 - a bad format string must not fail the job
            text = f"{record.levelname} {record.msg!r}"
        self.add_line(text)
        if self.forward_to is not None and self.forward_to.isEnabledFor(record.levelno):
            self.forward_to.handle(record)

    def add_line(self, text: str) -> None:
        if len(self._lines) == self.max_lines:
            self.dropped += 1
        self._lines.append(text[:MAX_LOG_LINE])

    def lines(self) -> list[str]:
        out = list(self._lines)
        if self.dropped:
            # The marker takes one slot, so the newest lines that still fit stay.
            kept = out[-(self.max_lines - 1):] if self.max_lines > 1 else []
            out = [f"({self.dropped + len(out) - len(kept)} earlier log lines dropped)", *kept]
        return out


def job_logger(job: Job, capture: LogCapture, level: int) -> logging.Logger:
    """A logger private to one attempt.

    Built directly (not through ``logging.getLogger``) so thousands of attempts do not
    pile up in the logging registry; it does not propagate, the capture forwards.
    """
    logger = logging.Logger(f"headgate.job.{job.kind}", level)
    logger.propagate = False
    logger.addHandler(capture)
    return logger


def retry_store(call: Callable[[], T], delays: tuple[float, ...] = WRITE_RETRY_DELAYS_S) -> T:
    """Call, retrying StoreUnavailable after each delay; re-raises the last one."""
    for delay in delays:
        try:
            return call()
        except StoreUnavailable:
            time.sleep(delay)
    return call()


class JobContext:
    """The handler's view of its attempt.

    ``payload`` is what the kind's decoder returned (the raw bytes when there is no
    decoder); ``job.payload`` always holds the raw bytes. Writes return ``True`` when
    stored and ``False`` when dropped (attempt no longer ours, or the store stayed
    unavailable): a report is never worth failing the job over. Invalid arguments raise
    ``InvalidInput``, because that is a bug in the handler.
    """

    def __init__(
        self, store: Admission, claim: Claim, payload: Any, gate: AttemptGate,
        logger: logging.Logger | Callable[[], logging.Logger], worker_id: str,
        deadline_monotonic: float | None = None,
    ) -> None:
        self.store = store
        self.claim = claim
        self.job: Job = claim.job
        self.payload = payload
        self.gate = gate
        # A logger, or how to build it: most attempts never log, and a logger with its
        # capture handler is the costliest part of setting up an attempt.
        self._logger = logger
        self._logger_lock = threading.Lock()
        self.worker_id = worker_id
        self.deadline_monotonic = deadline_monotonic
        self.result: bytes | None = None
        self.result_schema_version = 1

    @property
    def logger(self) -> logging.Logger:
        """This attempt's logger: its lines go into the attempt's history (for attempts
        that do not succeed, by default) and on to the ``headgate.job`` logger."""
        logger = self._logger
        if not isinstance(logger, logging.Logger):
            with self._logger_lock:
                if not isinstance(self._logger, logging.Logger):
                    self._logger = self._logger()
                logger = self._logger
        return logger

    # -- cancellation -------------------------------------------------------------
    @property
    def cancelled(self) -> threading.Event:
        """Set when the handler should stop: timeout, deadline, operator cancel, lease
        lost, or shutdown. Wait on it instead of ``time.sleep``."""
        return self.gate.cancelled

    @property
    def cancel_reason(self) -> str | None:
        return self.gate.reason

    def remaining_ms(self) -> int | None:
        """Milliseconds until this attempt's timeout or deadline (None: unbounded)."""
        if self.deadline_monotonic is None:
            return None
        return max(0, int((self.deadline_monotonic - time.monotonic()) * 1000))

    # -- reports ------------------------------------------------------------------
    def progress(self, current: int, total: int, message: str | None = None) -> bool:
        check_progress(current, total, message)
        return self._write("progress", lambda: self.store.report_progress(
            self.claim, current, total, message))

    def output(self, data: bytes, schema_version: int = 1) -> bool:
        data = _blob("output", data, schema_version)
        return self._write("output", lambda: self.store.write_output(
            self.claim, data, schema_version))

    def set_result(self, data: bytes, schema_version: int = 1) -> None:
        """Recorded with the success ack (ignored for any other outcome)."""
        self.result = _blob("result", data, schema_version)
        self.result_schema_version = schema_version

    def _write(self, what: str, call: Callable[[], None]) -> bool:
        if self.gate.closed:
            return False
        try:
            retry_store(call)
            return True
        except LeaseLost:
            self.gate.close("lease lost")
            log.info("job %s: %s write refused, lease lost; abandoning", self.job.id, what)
            return False
        except StoreUnavailable as exc:
            log.warning("job %s: %s not written, store unavailable: %s", self.job.id, what, exc)
            return False


def check_progress(current: Any, total: Any, message: Any) -> None:
    """Checked where the handler calls, in either mode, so a bad report raises in the
    handler rather than vanishing in an isolated child's pipe."""
    for name, value in (("current", current), ("total", total)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(f"progress {name} must be an integer >= 0")
    if message is not None and len(message.encode()) > MAX_PROGRESS_MESSAGE:
        raise InvalidInput(f"progress message must be at most {MAX_PROGRESS_MESSAGE} bytes")


def _blob(what: str, data: Any, schema_version: int) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInput(f"{what} must be bytes")
    data = bytes(data)
    if len(data) > MAX_PAYLOAD:
        raise InvalidInput(f"{what} must be at most {MAX_PAYLOAD} bytes")
    if isinstance(schema_version, bool) or not isinstance(schema_version, int) \
            or schema_version < 1:
        raise InvalidInput(f"{what} schema_version must be an integer >= 1")
    return data
