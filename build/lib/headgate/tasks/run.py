"""The worker side of a task: decode the arguments, run the middleware chain around the
function, turn its value into the job's result and its exception into the task's retry
decision.

A run is a plain handler for the ``Worker`` (``handler(job, ctx)``) when the task and
every middleware are plain functions, and a coroutine handler — run on the worker's
own event loop — when any of them is ``async def``. In a coroutine run a plain
function task runs in a thread (``asyncio.to_thread``), and a plain middleware runs in
a thread whose ``call_next()`` waits for the rest of the chain on the loop: each link
keeps its own calling convention, and the loop is never blocked.

Inside a run, ``current()`` gives the ``TaskRun`` (the job, its ``JobContext`` for
progress, output and ``cancelled``, and the decoded arguments): tasks take their own
arguments, not the context.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headgate.core import Job
from headgate.worker import JobContext, JobOutcome, Retry, Skip
from headgate.worker.execution import error_text

from .retry import delay_for

if TYPE_CHECKING:
    from .task import Task

# `retry` left out at @app.task: the store's default backoff.
DEFAULT_RETRY: Any = object()

_current: contextvars.ContextVar[TaskRun] = contextvars.ContextVar("headgate_task_run")


@dataclass(frozen=True, slots=True)
class TaskRun:
    """What middleware (and, through ``current()``, the task) sees of one attempt."""

    job: Job
    ctx: JobContext
    task: Task[Any, Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def kind(self) -> str:
        return self.job.kind

    @property
    def attempt(self) -> int:
        """Failed attempts before this one (0 on the first run)."""
        return self.job.attempt


def current() -> TaskRun:
    """The task run executing in this context; LookupError outside one."""
    try:
        return _current.get()
    except LookupError:
        raise LookupError("headgate.tasks.current() called outside a task run") from None


Middleware = Callable[[TaskRun, Callable[[], Any]], Any]


def is_async(fn: Callable[..., Any]) -> bool:
    # A callable object's coroutine method counts too.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        type(fn).__call__)  # noqa: B004


def failure_outcome(task: Task[Any, Any], job: Job, exc: Exception) -> JobOutcome:
    """The task's retry policy applied to an exception of its run."""
    text = error_text(exc)
    if task.retry_on is not None and not isinstance(exc, task.retry_on):
        return Skip(f"not retried (not in retry_on): {text}")
    if task.retry is None:
        return Skip(f"not retried (retry=None): {text}")
    if task.retry is DEFAULT_RETRY:
        return Retry(None, text)
    return Retry(delay_for(task.retry, job.attempt + 1), text)  # type: ignore[arg-type]


def result_of(task: Task[Any, Any], value: Any) -> Any:
    """The handler's return: an outcome passes through, anything else is encoded as the
    job's result. A value the codec cannot encode archives the job: running it again
    would give the same value."""
    if isinstance(value, JobOutcome):
        return value
    try:
        data = task.codec.encode_result(value)
    except Exception as exc:  # noqa: BLE001 - whatever the codec raises
        return Skip(f"task result cannot be encoded: {type(exc).__name__}: {exc}")
    if not isinstance(data, bytes):
        return Skip(f"task codec returned {type(data).__name__} for the result, not bytes")
    return data


def decoder_for(task: Task[Any, Any]) -> Callable[[bytes, int], Any]:
    """A worker decoder: a payload its codec cannot read is undecodable (never retried)."""

    def decode(raw: bytes, schema_version: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return task.codec.decode_args(raw)

    return decode


def make_handler(task: Task[Any, Any], middleware: Sequence[Middleware]
                 ) -> Callable[[Job, JobContext], Any]:
    if task.is_async or any(is_async(m) for m in middleware):
        return _coroutine_handler(task, list(middleware))
    return _plain_handler(task, list(middleware))


def _plain_handler(task: Task[Any, Any], middleware: list[Middleware]
                   ) -> Callable[[Job, JobContext], Any]:
    def handler(job: Job, ctx: JobContext) -> Any:
        args, kwargs = ctx.payload
        run = TaskRun(job, ctx, task, args, kwargs)
        token = _current.set(run)
        try:
            def call() -> Any:
                return task.fn(*args, **kwargs)

            for mw in reversed(middleware):
                call = _link(mw, run, call)
            try:
                value = call()
            except JobOutcome:
                raise
            except Exception as exc:
                raise failure_outcome(task, job, exc) from exc
            return result_of(task, value)
        finally:
            _current.reset(token)

    return handler


def _link(mw: Middleware, run: TaskRun, call_next: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: mw(run, call_next)


def _coroutine_handler(task: Task[Any, Any], middleware: list[Middleware]
                       ) -> Callable[[Job, JobContext], Any]:
    async def handler(job: Job, ctx: JobContext) -> Any:
        args, kwargs = ctx.payload
        run = TaskRun(job, ctx, task, args, kwargs)
        token = _current.set(run)
        try:
            async def call() -> Any:
                if task.is_async:
                    return await task.fn(*args, **kwargs)
                return await asyncio.to_thread(task.fn, *args, **kwargs)

            for mw in reversed(middleware):
                call = _async_link(mw, run, call)
            try:
                value = await call()
            except JobOutcome:
                raise
            except Exception as exc:
                raise failure_outcome(task, job, exc) from exc
            return result_of(task, value)
        finally:
            _current.reset(token)

    return handler


def _async_link(mw: Middleware, run: TaskRun, call_next: Callable[[], Any]
                ) -> Callable[[], Any]:
    if is_async(mw):
        async def link() -> Any:
            return await mw(run, call_next)

        return link

    async def threaded() -> Any:
        loop = asyncio.get_running_loop()

        def blocking_next() -> Any:
            return asyncio.run_coroutine_threadsafe(call_next(), loop).result()

        return await asyncio.to_thread(mw, run, blocking_next)

    return threaded


__all__ = ["DEFAULT_RETRY", "Middleware", "TaskRun", "current", "make_handler"]
