"""``async def`` handlers on a real worker (in a background thread of the test process,
against the `store` fixture): awaited to the end on the worker's event loop, never
acknowledged before that, cancelled by timeouts, deadlines and operator cancel, counted
against concurrency; in isolated children too. Refusals at registration."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import wait_for
from worker_app import state_of, worker_maker

import headgate
from headgate import Job, State, Store, Worker
from headgate.worker import JobContext


@pytest.fixture
def make_worker(store: Store) -> Iterator[Callable[..., Worker]]:
    """Builds (not starts) workers with the test app's handlers; stops them at the end."""
    yield from worker_maker(store, duties=False)


def test_an_async_handler_runs_to_its_end_before_the_job_completes(
    store: Store, make_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    release = threading.Event()
    seen: dict[str, Any] = {}

    async def handler(job: Job, ctx: JobContext) -> bytes:
        await asyncio.to_thread(release.wait, 20)
        await asyncio.sleep(0.01)
        (tmp_path / job.id).write_text("effect")
        seen["state_at_effect"] = state_of(store, job.id)
        return b"async result"

    worker = make_worker()
    worker.register("async", handler)
    job_id = headgate.Client(store).enqueue("async", b"")
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.RUNNING, 10, "the job to start")
    time.sleep(0.3)  # the handler awaits: nothing may be acknowledged meanwhile
    assert state_of(store, job_id) is State.RUNNING
    assert not (tmp_path / job_id).exists()
    release.set()
    wait_for(lambda: state_of(store, job_id) is State.COMPLETED, 10, "completion")
    assert (tmp_path / job_id).read_text() == "effect"
    assert seen["state_at_effect"] is State.RUNNING  # the effect came before the ack
    assert store.get_result(job_id).bytes == b"async result"
    job = store.get_job(job_id)
    assert (job.attempt, job.errors) == (0, [])


def test_an_async_handler_that_raises_is_retried_with_its_error_and_log_lines(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    async def flaky(job: Job, ctx: JobContext) -> None:
        await asyncio.sleep(0.01)
        if job.attempt == 0:
            ctx.logger.warning("async attempt %d fails", job.attempt + 1)
            raise ValueError("async failure")

    worker = make_worker()
    worker.register("flaky", flaky)
    job_id = headgate.Client(store).enqueue("flaky", b"")
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.COMPLETED, 20, "the retry to succeed")
    job = store.get_job(job_id)
    assert job.attempt == 1 and job.fence == 2
    [entry] = job.errors
    assert entry["outcome"] == "retry"
    assert entry["error"].startswith("ValueError: async failure")
    assert "test_worker_async.py" in entry["error"]  # the coroutine's frame
    assert entry["logs"] == ["WARNING async attempt 1 fails"]


def test_an_operator_cancel_cancels_the_task_and_the_job_ends_cancelled(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    started = threading.Event()
    seen: list[str] = []

    async def waits(job: Job, ctx: JobContext) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(ctx.cancel_reason or "")
            raise
        seen.append("finished")

    worker = make_worker(lease_ms=30_000)  # only the heartbeat can tell it
    worker.register("waits", waits)
    job_id = headgate.Client(store).enqueue("waits", b"")
    worker.start()
    assert started.wait(10)
    cancelled_at = time.monotonic()
    store.operator_cancel(job_id)
    wait_for(lambda: seen, 10, "the coroutine to see CancelledError")
    assert time.monotonic() - cancelled_at < 5
    assert seen == ["no longer running in the store (operator cancel or lease lost)"]
    assert state_of(store, job_id) is State.CANCELLED
    wait_for(lambda: worker.inflight == 0, 5, "the slot to be freed")


@pytest.mark.parametrize("limit", ["timeout", "deadline"])
def test_an_async_handler_past_its_time_limit_is_cancelled_like_a_plain_one(
    store: Store, make_worker: Callable[..., Worker], limit: str
) -> None:
    seen: list[float] = []

    async def sleeps(job: Job, ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append(time.monotonic())
            raise

    worker = make_worker()
    option = {"timeout_ms": 300} if limit == "timeout" else {"deadline_ms": 1_500}
    worker.register("sleeps", sleeps, **option)
    job_id = headgate.Client(store).enqueue("sleeps", b"", max_attempts=1)
    started = time.monotonic()
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.ARCHIVED, 15, "the attempt to end")
    assert seen and seen[0] - started < 10
    [entry] = store.get_job(job_id).errors
    if limit == "timeout":
        assert (entry["outcome"], entry["error"]) == ("retry", "timed out after 300 ms")
    else:
        assert (entry["outcome"], entry["error"]) == ("skip", "deadline exceeded while running")


def test_a_coroutine_that_swallows_its_cancel_is_still_not_a_success(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    async def stubborn(job: Job, ctx: JobContext) -> bytes:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            pass  # and returns as if it had finished
        return b"claims success"

    worker = make_worker()
    worker.register("stubborn", stubborn, timeout_ms=200)
    job_id = headgate.Client(store).enqueue("stubborn", b"", max_attempts=1)
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.ARCHIVED, 15, "the attempt to end")
    assert store.get_job(job_id).errors[0]["error"] == "timed out after 200 ms"


def test_concurrency_2_runs_exactly_2_async_jobs_at_once(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    release = threading.Event()
    running: list[str] = []
    peak = [0]

    async def blocks(job: Job, ctx: JobContext) -> None:
        running.append(job.id)  # every coroutine runs on the one loop thread
        peak[0] = max(peak[0], len(running))
        try:
            await asyncio.to_thread(release.wait, 20)
        finally:
            running.remove(job.id)

    worker = make_worker(concurrency=2)
    worker.register("blocks", blocks)
    ids = [headgate.Client(store).enqueue("blocks", b"") for _ in range(3)]
    worker.start()
    wait_for(lambda: len(running) == 2, 10, "two jobs to run")
    time.sleep(0.5)  # a third slot would have been filled by now
    assert len(running) == 2
    assert sorted(state_of(store, i).value for i in ids) == ["available", "running", "running"]
    release.set()
    wait_for(lambda: all(state_of(store, i) is State.COMPLETED for i in ids), 10, "all three")
    assert peak[0] == 2


def test_a_plain_function_returning_a_coroutine_has_it_awaited(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    async def work(job: Job, ctx: JobContext, suffix: bytes) -> bytes:
        await asyncio.sleep(0.01)
        return job.id.encode() + suffix

    worker = make_worker()
    worker.register("partial", functools.partial(work, suffix=b":partial"))
    worker.register("lambda", lambda job, ctx: work(job, ctx, b":lambda"))
    client = headgate.Client(store)
    ids = {kind: client.enqueue(kind, b"") for kind in ("partial", "lambda")}
    worker.start()
    for kind, job_id in ids.items():
        wait_for(lambda j=job_id: state_of(store, j) is State.COMPLETED, 10, kind)
        assert store.get_result(job_id).bytes == f"{job_id}:{kind}".encode()


def test_a_handler_returning_an_unrun_generator_or_coroutine_fails_its_attempt(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    def gen() -> Iterator[int]:
        yield 1

    async def inner() -> None:
        return None

    async def returns_coroutine(job: Job, ctx: JobContext) -> Any:
        return inner()  # forgot the await

    worker = make_worker()
    worker.register("gen", lambda job, ctx: gen())
    worker.register("coro", returns_coroutine)
    client = headgate.Client(store)
    ids = {kind: client.enqueue(kind, b"", max_attempts=1) for kind in ("gen", "coro")}
    worker.start()
    for kind, job_id in ids.items():
        wait_for(lambda j=job_id: state_of(store, j) is State.ARCHIVED, 10, kind)
        error = store.get_job(job_id).errors[0]["error"]
        name = "generator" if kind == "gen" else "coroutine"
        assert error.startswith(f"handler returned a {name} that was never run"), error


def test_async_handlers_in_isolated_children(
    store: Store, make_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    client = headgate.Client(store)
    done_id = client.enqueue("isolated-async-mark", b"iso")
    marker = tmp_path / "sleep.cancelled"
    sleep_id = client.enqueue("isolated-async-sleep", str(marker).encode(), max_attempts=1)
    worker = make_worker(kill_grace_ms=5_000)
    worker.start()
    wait_for(lambda: state_of(store, done_id) is State.COMPLETED, 30, "the isolated run")
    assert store.get_result(done_id).bytes == b"async:iso"
    wait_for(lambda: state_of(store, sleep_id) is State.ARCHIVED, 30, "the timed-out run")
    assert store.get_job(sleep_id).errors[0]["error"] == "timed out after 2000 ms"
    # SIGTERM cancelled the child's task (2 s is time for the child to start).
    assert marker.read_text() == "started\ncancelled\n"


def test_a_handler_that_cannot_run_is_refused_at_registration(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    worker = make_worker()

    async def handler(job: Job, ctx: JobContext) -> None:
        return None

    async def agen(job: Job, ctx: JobContext) -> Any:
        yield None

    def gen(job: Job, ctx: JobContext) -> Any:
        yield None

    coroutine = handler(None, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a coroutine object"):
        worker.register("a", coroutine)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be callable.*not int"):
        worker.register("b", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="generator function"):
        worker.register("c", agen)
    with pytest.raises(TypeError, match="generator function"):
        worker.register("d", gen)
    worker.register("e", handler)  # the async def itself is fine
    assert "e" in worker.kinds and not {"a", "b", "c", "d"} & set(worker.kinds)
