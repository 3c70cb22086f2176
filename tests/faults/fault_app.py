"""The worker app of the fault suite (`headgate worker --app fault_app:make_worker`).

One kind, `fx`, whose JSON payload says what to do: `{"o": outcome, "ms": work}`.
Every run appends `start <id> <fence> <pid>` when it begins and
`end <id> <fence> <outcome> <pid>` just before it returns, to
`$HG_FAULT_DIR/effects.log` — opened with O_APPEND and written with one write(2) per
line, so lines from concurrent processes never interleave and a SIGKILL cannot tear
one. A successful run records `fence=<fence>` as the job's result, so the test can see
which run's ack the store kept.

Outcomes (`o`): ok; retry (first attempt retries after 10 ms); skip; snooze (first run
snoozes 20 ms); rate_limited (first run); raise (always raises: archived after
max_attempts); hold (the run of fence 1 blocks until its process dies, a re-run succeeds);
poison (SIGKILLs its own process on every run). "First run" is fence - crash_attempt
== 1: a run after a crash is still the first that returned.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from headgate import Job, RateLimited, Retry, Skip, Snooze, Store, Worker
from headgate.worker import JobContext

_fd: int | None = None


def _effect(line: str) -> None:
    global _fd
    if _fd is None:
        base = Path(os.environ.get("HG_FAULT_DIR", "."))
        _fd = os.open(base / "effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, (line + "\n").encode())


def fx(job: Job, ctx: JobContext) -> object:
    plan = json.loads(job.payload or b"{}")
    pid = os.getpid()
    _effect(f"start {job.id} {job.fence} {pid}")
    outcome = plan.get("o", "ok")
    if plan.get("ms"):
        time.sleep(plan["ms"] / 1000)
    first = job.fence - job.crash_attempt == 1

    def end(label: str) -> None:
        _effect(f"end {job.id} {job.fence} {label} {pid}")

    if outcome == "poison":
        os.kill(pid, signal.SIGKILL)
    if outcome == "hold" and job.fence == 1:
        ctx.cancelled.wait(120)  # until this process is killed (or the job cancelled)
        end("cancelled")
        return None
    if outcome == "retry" and job.attempt == 0:
        end("retry")
        raise Retry(delay_ms=10, reason="soak retry")
    if outcome == "skip":
        end("skip")
        return Skip("soak skip")
    if outcome == "snooze" and first:
        end("snooze")
        return Snooze(20)
    if outcome == "rate_limited" and first:
        end("rate_limited")
        return RateLimited(20)
    if outcome == "raise":
        end("raise")
        raise RuntimeError(f"soak failure on attempt {job.attempt + 1}")
    ctx.set_result(f"fence={job.fence}".encode())
    end("ok")
    return None


def make_worker(store: Store) -> Worker:
    """Short leases, heartbeats and duty ticks, so faults are recovered in seconds.
    The CLI's --lease-ms / --concurrency / --duties override these."""
    worker = Worker(store, queues=["default"], concurrency=4, lease_ms=1500,
                    heartbeat_ms=300, drain_ms=2000, duty_interval_ms=200,
                    poll_ceiling_ms=200)
    worker.register("fx", fx)
    return worker
