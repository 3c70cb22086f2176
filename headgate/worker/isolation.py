"""Isolated mode: one attempt in a child process.

An ``async def`` handler runs in its child on a fresh event loop (``asyncio.run``);
SIGTERM cancels its task as well as setting ``ctx.cancelled``.

Why: a thread cannot be killed. A handler that hangs in C code, leaks memory, or takes
the interpreter down with it is contained in a child, which the worker can SIGTERM
(the child sets ``ctx.cancelled``, so a cooperative handler returns), then SIGKILL
after a grace period. A child that dies without reporting is a crash of that attempt:
it is acked as a retry with "child process died (signal N)".

How: children start from a fork server (``multiprocessing`` "forkserver", preloaded
with the handler modules, so a child costs a fork, not an interpreter start-up), or
``spawn`` where fork servers are unavailable. The handler is looked up in the child by
``module:qualname`` (``handlers.handler_ref``), so it must be a module-level function
(its module is imported in the fork server, so it should not open stores or threads at
import time — use the ``--app`` factory form for that); a worker whose isolated
handlers include one that is not refuses to start. The parent decodes the
payload (an undecodable job never costs a process) and pickles job and decoded value to
the child. Progress, output, result and log lines come back over a pipe; the parent
writes them with the attempt's fence, so a child of a superseded attempt cannot write.
"""

from __future__ import annotations

import inspect
import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any

from headgate.core import Job, Outcome

from .aio import run_in_child
from .execution import Decision, error_text, from_exception, from_value, never_run
from .handlers import resolve_ref
from .job_context import MAX_LOG_LINE, JobContext, LogCapture, _blob, check_progress
from .outcomes import JobOutcome

log = logging.getLogger("headgate.worker")

_ctx_lock = threading.Lock()
_mp_context: Any = None


def mp_context(preload: list[str]) -> Any:
    """The process-wide start context, created once (a fork server is per process)."""
    global _mp_context
    with _ctx_lock:
        if _mp_context is None:
            methods = multiprocessing.get_all_start_methods()
            if "forkserver" in methods:
                ctx: BaseContext = multiprocessing.get_context("forkserver")
                modules = ["headgate.worker.isolation"] + [
                    m for m in dict.fromkeys(preload) if m != "__main__"
                ]
                ctx.set_forkserver_preload(modules)
            else:  # pragma: no cover - non-POSIX
                ctx = multiprocessing.get_context("spawn")
            _mp_context = ctx
        return _mp_context


# -- child side ---------------------------------------------------------------------

class _PipeLog(logging.Handler):
    def __init__(self, send: Callable[[tuple], None]) -> None:
        super().__init__(logging.NOTSET)
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.levelname} {record.getMessage()}"
        except Exception:  # noqa: BLE001
            text = f"{record.levelname} {record.msg!r}"
        self._send(("log", record.levelno, text[:MAX_LOG_LINE]))


class ChildContext:
    """The handler's context inside the child: same surface as ``JobContext``; writes
    travel to the parent, which applies the fence. Returns True once handed over."""

    def __init__(self, conn: Connection, job: Job, payload: Any, worker_id: str,
                 log_level: int) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.job = job
        self.payload = payload
        self.worker_id = worker_id
        self.cancelled = threading.Event()
        self.result: bytes | None = None
        self.result_schema_version = 1
        self.logger = logging.Logger(f"headgate.job.{job.kind}", log_level)
        self.logger.propagate = False
        self.logger.addHandler(_PipeLog(self._send))

    @property
    def cancel_reason(self) -> str | None:
        return "terminated by worker" if self.cancelled.is_set() else None

    def remaining_ms(self) -> int | None:
        return None

    def _send(self, message: tuple) -> None:
        with self._lock:
            self._conn.send(message)

    def progress(self, current: int, total: int, message: str | None = None) -> bool:
        check_progress(current, total, message)
        self._send(("progress", current, total, message))
        return True

    def output(self, data: bytes, schema_version: int = 1) -> bool:
        self._send(("output", _blob("output", data, schema_version), schema_version))
        return True

    def set_result(self, data: bytes, schema_version: int = 1) -> None:
        self.result = _blob("result", data, schema_version)
        self.result_schema_version = schema_version


def child_main(conn: Connection, ref: str, job: Job, payload: Any, worker_id: str,
               log_level: int) -> None:
    """Entry point of the child process."""
    # Ctrl-C at a terminal signals the whole process group; the parent decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctx = ChildContext(conn, job, payload, worker_id, log_level)
    signal.signal(signal.SIGTERM, lambda *_: ctx.cancelled.set())
    try:
        fn = resolve_ref(ref)
        value = fn(job, ctx)
        if inspect.isawaitable(value):  # async def: on a loop of the child's own
            value = run_in_child(value, ctx.cancelled)
        if (unrun := never_run(value)) is not None:
            message: tuple = ("done", "error", unrun, None, 1)
        elif isinstance(value, JobOutcome):
            message = ("done", "outcome", value, None, 1)
        elif isinstance(value, bytes | bytearray | memoryview) and ctx.result is None:
            message = ("done", "value", None, bytes(value), 1)
        else:
            message = ("done", "value", None, ctx.result, ctx.result_schema_version)
    except JobOutcome as outcome:
        message = ("done", "outcome", outcome, None, 1)
    except BaseException as exc:  # noqa: BLE001 - everything is a retry with its text
        message = ("done", "error", error_text(exc), None, 1)
    try:
        ctx._send(message)
    except Exception as exc:  # noqa: BLE001 - e.g. an outcome that does not pickle
        ctx._send(("done", "error", f"cannot report outcome to worker: {exc}", None, 1))
    conn.close()


# -- parent side --------------------------------------------------------------------

def run_isolated(
    ref: str, ctx: JobContext, capture: LogCapture, kill_grace_s: float,
    preload: list[str], on_process: Callable[[Any], None], log_level: int,
) -> Decision:
    """Run one attempt in a child; returns the decision (the caller still applies
    cancellation reasons such as timeout on top of it)."""
    job = ctx.job
    mp = mp_context(preload)
    receiver, sender = mp.Pipe(duplex=False)
    process = mp.Process(
        target=child_main, args=(sender, ref, job, ctx.payload, ctx.worker_id, log_level),
        name=f"headgate-job-{job.id}", daemon=True,
    )
    try:
        process.start()
    except Exception as exc:  # noqa: BLE001 - e.g. payload that does not pickle
        receiver.close()
        sender.close()
        return Decision(Outcome.RETRY, f"could not start isolated child: {error_text(exc)}")
    sender.close()
    on_process(process)
    done: tuple | None = None
    term_at: float | None = None
    killed = False
    forward = capture.forward_to
    try:
        while True:
            if receiver.poll(0.02):
                try:
                    message = receiver.recv()
                except Exception:  # noqa: BLE001 - EOF, or a message torn by a kill
                    break
                done = _apply(message, ctx, capture, forward) or done
                if done is not None:
                    break
            elif not process.is_alive():
                # Drain what it sent before dying.
                while receiver.poll(0):
                    try:
                        done = _apply(receiver.recv(), ctx, capture, forward) or done
                    except Exception:  # noqa: BLE001
                        break
                break
            # Every pass, not only quiet ones: a child that logs without pause must
            # still be stopped on time.
            if ctx.cancelled.is_set():
                now = time.monotonic()
                if term_at is None:
                    term_at = now
                    process.terminate()
                elif not killed and now - term_at >= kill_grace_s:
                    killed = True
                    process.kill()
        process.join(kill_grace_s if done is not None else 5)
        if process.is_alive():
            process.kill()
            process.join(5)
    finally:
        receiver.close()
    if done is not None:
        _, kind, value, result, result_sv = done
        if kind == "outcome":
            return from_exception(value, job)
        if kind == "error":
            return Decision(Outcome.RETRY, value)
        return from_value(None, job, result, result_sv)
    code = process.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        return Decision(Outcome.RETRY, f"child process died (signal {-code}, {name})")
    return Decision(Outcome.RETRY, f"child process exited with code {code} without an outcome")


def _apply(message: tuple, ctx: JobContext, capture: LogCapture,
           forward: logging.Logger | None) -> tuple | None:
    kind = message[0]
    if kind == "done":
        return message
    if kind == "progress":
        _, current, total, text = message
        try:
            ctx.progress(current, total, text)
        except Exception as exc:  # noqa: BLE001 - bad arguments from the child
            capture.add_line(f"ERROR progress rejected: {exc}")
    elif kind == "output":
        _, data, schema_version = message
        ctx.output(data, schema_version)
    elif kind == "log":
        _, level, text = message
        capture.add_line(text)
        if forward is not None and forward.isEnabledFor(level):
            forward.log(level, "job %s (isolated): %s", ctx.job.id, text)
    return None
