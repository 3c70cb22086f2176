"""Coroutine handlers: ``async def handler(job, ctx)`` awaited to the end on the
worker's own event loop.

One loop per worker, on a thread of its own (started with the first coroutine, so a
worker of plain handlers has none). The pool thread that took the job calls the handler,
hands the coroutine to the loop and waits until the task has really ended, so a running
coroutine holds its pool thread — one ``concurrency`` slot — exactly like a plain
handler, and admission, draining and time limits need no second accounting.

Why one loop per worker rather than one per pool thread: coroutines of one worker share
loop-bound resources (an ``aiohttp`` session, an async database pool built on first
use), which a loop per thread would make fail with "attached to a different loop", and
waiting coroutines cost no thread time. The price: a coroutine that blocks (CPU work, a
synchronous call) stalls the other coroutines of its worker, so blocking work belongs in
``await asyncio.to_thread(...)`` or a plain handler. Even then, time limits hold: the
lease keeper's timeout grace records the attempt while its coroutine is stuck.

Cancellation: whatever sets ``ctx.cancelled`` (timeout, deadline, operator cancel, lost
lease, release at shutdown) also cancels the task, so the coroutine sees
``CancelledError`` at its next ``await``. A task that ended by cancellation, or a handler
that swallowed it, is never a success: the attempt's gate decides (retry "timed out",
skip at a deadline, nothing written once the job is no longer ours).

``ctx.progress`` / ``ctx.output`` are short blocking store writes; from a coroutine,
``await asyncio.to_thread(ctx.progress, ...)`` keeps the loop free meanwhile.
``ctx.cancelled`` is a ``threading.Event``: coroutines should not ``wait()`` on it (that
blocks the loop) — they get ``CancelledError`` instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import signal
import threading
from collections.abc import Awaitable
from typing import Any

from .job_context import AttemptGate

log = logging.getLogger("headgate.worker")

# How long stop() lets cancelled tasks finish their clean-up.
STOP_GRACE_S = 1.0


class CoroutineCancelled(Exception):  # noqa: N818 - named for what happened to the task
    """The handler's task ended cancelled (recorded as a retry with this text unless
    the attempt's own end — timeout, deadline, abandonment — says otherwise)."""


class EventLoopThread:
    """The worker's event loop, run on a daemon thread."""

    def __init__(self, name: str = "headgate-asyncio") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def started(self) -> bool:
        return self._loop is not None

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, started on first use."""
        with self._lock:
            if self._stopped:
                raise RuntimeError("the worker's event loop has stopped")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(target=self._serve, args=(loop, ready),
                                          name=self.name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def run(self, awaitable: Awaitable[Any], gate: AttemptGate) -> Any:
        """Await ``awaitable`` on the loop from a pool thread; its value, or its
        exception raised here. Blocks until the task has ended — after a cancel too."""
        try:
            loop = self.loop()
        except RuntimeError:
            _discard(awaitable)
            raise
        ended: concurrent.futures.Future[Any] = concurrent.futures.Future()
        task_box: list[asyncio.Future[Any]] = []

        def begin() -> None:
            try:
                task = asyncio.ensure_future(_awaited(awaitable))
            except BaseException as exc:  # noqa: BLE001 - e.g. an awaitable of no loop
                ended.set_exception(exc)
                return
            task_box.append(task)
            task.add_done_callback(lambda t: _transfer(t, ended, gate))
            if gate.cancelled.is_set():  # cancelled before it was scheduled
                task.cancel()

        def cancel() -> None:
            if task_box and not task_box[0].done():
                task_box[0].cancel()

        def cancel_soon() -> None:  # called by whichever thread cancels the attempt
            try:
                loop.call_soon_threadsafe(cancel)
            except RuntimeError:  # the loop is closed: nothing runs on it any more
                pass

        try:
            loop.call_soon_threadsafe(begin)
        except RuntimeError:
            _discard(awaitable)
            raise
        gate.on_cancel(cancel_soon)
        return ended.result()

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Cancel what still runs (its attempts were settled already), give the tasks
        ``grace_s`` to clean up, then stop the loop."""
        with self._lock:
            self._stopped = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            done = asyncio.run_coroutine_threadsafe(_cancel_all(grace_s), loop)
            done.result(grace_s + 1.0)
        except Exception as exc:  # noqa: BLE001 - stopping anyway
            log.debug("event loop clean-up: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(grace_s + 1.0)


def _discard(awaitable: Awaitable[Any]) -> None:
    """A coroutine that will never be awaited is closed (no "never awaited" warning;
    the attempt fails with the error the caller raises)."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    # ensure_future takes coroutines and futures; this takes any awaitable.
    return await awaitable


def _transfer(task: asyncio.Future[Any], ended: concurrent.futures.Future[Any],
              gate: AttemptGate) -> None:
    if task.cancelled():
        ended.set_exception(CoroutineCancelled(
            f"cancelled ({gate.reason})" if gate.reason else "cancelled, not by the worker"))
    elif (exc := task.exception()) is not None:
        ended.set_exception(exc)
    else:
        ended.set_result(task.result())


async def _cancel_all(grace_s: float) -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=grace_s)


def run_in_child(awaitable: Awaitable[Any], cancelled: threading.Event) -> Any:
    """Isolated mode: await in the child process on a fresh loop. SIGTERM from the
    parent sets ``cancelled`` (``ctx.cancelled``) and cancels the task; one that came
    before the loop started (``cancelled`` already set) cancels it at once."""

    async def main() -> Any:
        task = asyncio.ensure_future(_awaited(awaitable))

        def terminate() -> None:
            cancelled.set()
            task.cancel()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminate)
        if cancelled.is_set():
            task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            raise CoroutineCancelled("cancelled (terminated by worker)") from None

    return asyncio.run(main())
