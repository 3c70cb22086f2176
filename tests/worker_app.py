"""The worker app the worker tests run — in-process and as `headgate worker --app
worker_app:make_worker` child processes. No tests here (its name is not
`test_*`); it also holds the in-process tests' worker builder.

Handlers decide from the claim's counters (`attempt`, `fence`, `crash_attempt`) so one
job can fail, snooze or crash on its first run and succeed on a later one. Files in
`$HG_TEST_DIR` let a test in another process see that a handler started or noticed
cancellation.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from headgate import (
    Job,
    JsonDecoder,
    RateLimited,
    Retry,
    Revoke,
    Skip,
    Snooze,
    State,
    Store,
    Worker,
)
from headgate.core import InvalidInput
from headgate.worker import JobContext


def _mark(job: Job, what: str) -> None:
    base = os.environ.get("HG_TEST_DIR")
    if base:
        (Path(base) / f"{job.id}.{what}").write_text(str(os.getpid()))


def ok(job: Job, ctx: JobContext) -> bytes:
    return b"done:" + (job.payload or b"")


def fail_once(job: Job, ctx: JobContext) -> None:
    if job.attempt == 0:
        ctx.logger.warning("first attempt of %s fails on purpose", job.id)
        raise RuntimeError("transient failure")


def always_fail(job: Job, ctx: JobContext) -> None:
    raise ValueError(f"permanent failure on attempt {job.attempt + 1}")


def skip(job: Job, ctx: JobContext) -> Skip:
    return Skip("not for us")


def revoke(job: Job, ctx: JobContext) -> None:
    raise Revoke()


def snooze_once(job: Job, ctx: JobContext) -> Snooze | None:
    return Snooze(50) if job.fence == 1 else None


def rate_limited_once(job: Job, ctx: JobContext) -> RateLimited | None:
    return RateLimited(20) if job.fence == 1 else None


def retry_fast(job: Job, ctx: JobContext) -> None:
    if job.attempt == 0:
        raise Retry(delay_ms=10, reason="upstream busy")


def json_v2(job: Job, ctx: JobContext) -> None:
    # The decoder upcast every version to {"name": ..., "version": 2}.
    ctx.set_result(f"{ctx.payload['name']}@{ctx.payload['version']}".encode())


def _v1_to_v2(value: dict) -> dict:
    return {"name": value["user"], "version": 2}


def block(job: Job, ctx: JobContext) -> None:
    """Runs until cancelled — unless this is a re-run after a crash or release."""
    if job.crash_attempt or job.fence > 1:
        return None
    _mark(job, "started")
    if ctx.cancelled.wait(60):
        _mark(job, "cancelled")
    return None


def slow_cleanup(job: Job, ctx: JobContext) -> None:
    """Runs until cancelled, then takes a moment to clean up before it returns."""
    _mark(job, "started")
    if ctx.cancelled.wait(60):
        time.sleep(0.3)
        _mark(job, "cleaned")


def deaf(job: Job, ctx: JobContext) -> None:
    """Ignores cancellation: shutdown must not wait for it beyond its bound."""
    _mark(job, "started")
    time.sleep(60)


def suicide(job: Job, ctx: JobContext) -> None:
    _mark(job, "started")
    os.kill(os.getpid(), signal.SIGKILL)


def isolated_report(job: Job, ctx: JobContext) -> None:
    ctx.progress(3, 4, "three quarters")
    ctx.output(b"partial output", schema_version=2)
    ctx.logger.info("child pid %d", os.getpid())
    ctx.set_result(b"isolated result")


def isolated_crash(job: Job, ctx: JobContext) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def isolated_hang(job: Job, ctx: JobContext) -> None:
    """Ignores SIGTERM's cancel flag entirely: only SIGKILL ends it."""
    _mark(job, "started")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)


def isolated_hang_pid(job: Job, ctx: JobContext) -> None:
    """isolated_hang that writes its pid to the file its payload names (a forkserver
    started by an earlier test does not see a later HG_TEST_DIR)."""
    Path(job.payload.decode()).write_text(str(os.getpid()))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)


def isolated_chatty(job: Job, ctx: JobContext) -> None:
    """Ignores SIGTERM and logs every few milliseconds: a busy pipe must not hide the
    parent's kill timer."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        ctx.logger.info("still busy")
        time.sleep(0.003)


def oversized_progress(job: Job, ctx: JobContext) -> None:
    """Reports what a 600-byte progress message did: raised, or silently accepted."""
    try:
        ctx.progress(1, 2, "x" * 600)
    except InvalidInput as exc:
        ctx.set_result(str(exc).encode())
        return
    ctx.set_result(b"accepted")


async def async_mark(job: Job, ctx: JobContext) -> bytes:
    """An ``async def`` handler: its marker appears only after an await."""
    await asyncio.sleep(0.05)
    _mark(job, "async-done")
    ctx.logger.info("async handler ran in pid %d", os.getpid())
    return b"async:" + (job.payload or b"")


async def async_sleep(job: Job, ctx: JobContext) -> None:
    """Awaits for a minute; says in the file its payload names that it started and
    whether its task was cancelled."""
    report = Path(job.payload.decode())
    report.write_text("started\n")
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        with report.open("a") as f:
            f.write("cancelled\n")
        raise


def register_all(worker: Worker) -> Worker:
    worker.register("ok", ok)
    worker.register("fail-once", fail_once)
    worker.register("always-fail", always_fail)
    worker.register("skip", skip)
    worker.register("revoke", revoke)
    worker.register("snooze-once", snooze_once)
    worker.register("rate-limited-once", rate_limited_once)
    worker.register("retry-fast", retry_fast)
    worker.register("user.greet", json_v2, aliases=("user.hello",),
                    decoder=JsonDecoder(current=2, upcasters={1: _v1_to_v2}))
    worker.register("block", block)
    worker.register("slow-cleanup", slow_cleanup)
    worker.register("deaf", deaf)
    worker.register("suicide", suicide)
    worker.register("isolated-report", isolated_report, isolated=True)
    worker.register("isolated-crash", isolated_crash, isolated=True)
    worker.register("isolated-hang", isolated_hang, isolated=True)
    worker.register("isolated-chatty", isolated_chatty, isolated=True)
    worker.register("isolated-hang-pid", isolated_hang_pid, isolated=True)
    worker.register("oversized-progress", oversized_progress)
    worker.register("isolated-oversized-progress", oversized_progress, isolated=True)
    worker.register("async-mark", async_mark)
    worker.register("isolated-async-mark", async_mark, isolated=True)
    worker.register("isolated-async-sleep", async_sleep, isolated=True, timeout_ms=2_000)
    return worker


def make_worker(store: Store) -> Worker:
    """The `--app` factory: short leases and heartbeats so process tests run fast."""
    return register_all(Worker(store, queues=["default"], concurrency=8, lease_ms=1500,
                               heartbeat_ms=300, kill_grace_ms=500, duty_interval_ms=200))


# Short timings for in-process worker tests: quick heartbeats, polls and grace periods.
FAST = {"heartbeat_ms": 100, "poll_ceiling_ms": 50, "kill_grace_ms": 300,
        "timeout_grace_ms": 300, "lease_ms": 1500}


def state_of(store: Store, job_id: str) -> State | None:
    job = store.get_job(job_id)
    return None if job is None else job.state


def worker_maker(store: Store, **defaults: Any) -> Iterator[Callable[..., Worker]]:
    """A `make_worker` fixture's body: builds (not starts) workers with this app's
    handlers and the FAST timings (``defaults`` and each call's options over them),
    and stops the started ones at the end."""
    made: list[Worker] = []

    def make(**options: Any) -> Worker:
        worker = register_all(
            Worker(store, **{"concurrency": 4, **FAST, **defaults, **options}))
        made.append(worker)
        return worker

    yield make
    for worker in made:
        if worker._started:
            worker.stop(drain_ms=0, timeout=15)
