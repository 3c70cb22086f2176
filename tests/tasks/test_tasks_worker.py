"""The task layer with real worker processes (`headgate worker --app tasks_app:app`)
on both backends: results through result() and result_async(), per-task retry
policies ending in JobFailed, all-or-nothing enqueue_many, middleware order, a schedule
declared in code firing, and (PostgreSQL) a rolled-back transactional enqueue_async."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tasks_app
from support import headgate_cmd, wait_for

import headgate
from headgate import State, Store

TESTS_DIR = Path(__file__).resolve().parents[1]


class WorkerProcess:
    def __init__(self, store_url: str, tmp_path: Path, app: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
        env["HG_TEST_DIR"] = str(tmp_path)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
        self.log_path = tmp_path / "worker.log"
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [*headgate_cmd(), "worker", "--app", app, "--store", store_url,
             "--concurrency", "4"],
            env=env, cwd=tmp_path, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


@pytest.fixture
def app(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> Iterator[headgate.App]:
    """The test process's side of tasks_app: producing to the test's store."""
    monkeypatch.setenv("HG_TEST_DIR", str(tmp_path))
    tasks_app.app.use_store(store)
    yield tasks_app.app


@pytest.fixture
def worker(store_url: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def spawn(app: str = "tasks_app:app") -> WorkerProcess:
        started.append(WorkerProcess(store_url, tmp_path, app))
        return started[-1]

    yield spawn
    for w in started:
        w.stop()


def test_results_come_back_through_result_and_result_async(app, worker) -> None:
    proc = worker()
    ref = tasks_app.add.enqueue(2, 3)
    assert ref.result(timeout=30) == 5, proc.log()
    assert ref.state() is State.COMPLETED
    named = tasks_app.describe.enqueue("x", tags=["b", "a"])
    assert app.store.get_job(named.id).kind == "tasks.describe"
    assert named.result(timeout=30) == {"name": "x", "tags": ["a", "b"]}

    async def produce() -> list[int]:
        refs = [await tasks_app.add.enqueue_async(i, 1) for i in range(3)]
        refs += await tasks_app.add.enqueue_many_async(
            [tasks_app.add.call(10, 10), tasks_app.add.call(20, 20)])
        return list(await asyncio.gather(*(r.result_async(timeout=30) for r in refs)))

    assert asyncio.run(produce()) == [1, 2, 3, 20, 40]


def test_a_failing_task_raises_job_failed_after_its_own_retry_policy(app, worker,
                                                                     tmp_path) -> None:
    worker()
    ref = tasks_app.always_fails.enqueue("a")
    with pytest.raises(headgate.JobFailed) as failed:
        ref.result(timeout=30)
    assert failed.value.state == "archived"
    assert "ValueError: broken a" in failed.value.error
    job = app.store.get_job(ref.id)
    # max_attempts=3, and a 50 ms backoff instead of the store's 1 s, 2 s: three runs.
    assert job.attempt == 3 and len(job.errors) == 3
    assert (tmp_path / "fails-a").read_text().splitlines() == ["ran"] * 3
    gaps = [b["at_ms"] - a["at_ms"] for a, b in zip(job.errors, job.errors[1:], strict=False)]
    assert all(g < 900 for g in gaps), gaps  # the default backoff waits at least 750 ms


def test_retry_on_retries_only_the_named_exceptions(app, worker) -> None:
    worker()
    kept = tasks_app.picky.enqueue("key")
    dropped = tasks_app.picky.enqueue("type")
    with pytest.raises(headgate.JobFailed) as failed:
        dropped.result(timeout=30)
    assert "TypeError: do not retry me" in failed.value.error
    assert len(app.store.get_job(dropped.id).errors) == 1  # one run, not retried
    with pytest.raises(headgate.JobFailed) as failed:
        kept.result(timeout=30)
    assert "KeyError" in failed.value.error
    assert app.store.get_job(kept.id).attempt == 5  # max_attempts


def test_enqueue_many_is_all_or_nothing(app, worker) -> None:
    app.store.set_enqueue_limit("tasks", 2)
    calls = [tasks_app.add.call(i, i) for i in range(3)]
    with pytest.raises(headgate.Backpressure):
        tasks_app.add.enqueue_many(calls)
    assert app.store.counts("tasks").get("available", 0) == 0
    app.store.set_enqueue_limit("tasks", None)
    worker()
    refs = tasks_app.add.enqueue_many(calls)
    assert [r.result(timeout=30) for r in refs] == [0, 2, 4]


def test_middleware_wraps_each_run_in_registration_order(app, worker, tmp_path) -> None:
    worker()
    assert tasks_app.traced.enqueue("ok").result(timeout=30) == "OK"
    with pytest.raises(headgate.JobFailed):
        tasks_app.traced.options(max_attempts=1).enqueue("bad").result(timeout=30)
    assert (tmp_path / "middleware").read_text().splitlines() == [
        "outer in", "inner in", "task ok", "inner out", "outer saw OK",
        "outer in", "inner in", "task bad", "inner out", "outer saw RuntimeError",
    ]


def test_a_schedule_declared_in_code_is_upserted_at_start_and_fires(app, worker,
                                                                    tmp_path) -> None:
    assert app.store.get_schedule("tasks-heartbeat") is None
    proc = worker()
    wait_for(lambda: (tmp_path / "heartbeat").exists(), 30, f"a tick\n{proc.log()}")
    schedule = app.store.get_schedule("tasks-heartbeat")
    assert schedule is not None
    assert (schedule.kind, schedule.spec) == ("tasks_app.heartbeat", "@every:300")
    proc.stop()
    # A second start with the same declaration keeps the schedule's next_run_ms.
    before = app.store.get_schedule("tasks-heartbeat")
    assert tasks_app.app.sync_schedules(app.store) == {"upserted": [], "pruned": []}
    after = app.store.get_schedule("tasks-heartbeat")
    assert after is not None and before is not None
    assert after.next_run_ms == before.next_run_ms


def test_transactional_enqueue_async_rolled_back_enqueues_nothing(app, worker,
                                                                  backend) -> None:
    if backend != "pg":
        pytest.skip("conn= is PostgreSQL's (SQLite runs the sync enqueue in a thread)")
    import psycopg

    url = app.store.url

    async def produce() -> tuple[str, int]:
        async with await psycopg.AsyncConnection.connect(url) as conn:
            ref = await tasks_app.add.options(conn=conn).enqueue_async(1, 1)
            await conn.rollback()
            kept = await tasks_app.add.options(conn=conn).enqueue_async(2, 2)
            await conn.commit()
        return ref.id, await kept.result_async(timeout=30)

    worker()
    rolled_back, value = asyncio.run(produce())
    assert value == 4
    assert app.store.get_job(rolled_back) is None


def test_result_of_a_job_deleted_on_success_is_gone(app, worker) -> None:
    worker()
    ref = tasks_app.add.options(retention_ms=0).enqueue(1, 2)
    with pytest.raises(headgate.ResultGone, match="retention_ms=0"):
        ref.result(timeout=30)


def test_result_times_out_while_the_job_waits(app) -> None:
    ref = tasks_app.add.enqueue(1, 2)  # no worker
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        ref.result(timeout=0.3)
    assert time.monotonic() - started >= 0.3
    with pytest.raises(TimeoutError):
        asyncio.run(ref.result_async(timeout=0.2))


def test_async_tasks_and_async_middleware_run_on_the_workers_loop(store, worker,
                                                                  tmp_path, monkeypatch
                                                                  ) -> None:
    if not getattr(headgate.Worker, "runs_coroutines", False):
        pytest.skip("this Worker does not run coroutine handlers yet")
    import tasks_async_app

    monkeypatch.setenv("HG_TEST_DIR", str(tmp_path))
    tasks_async_app.app.use_store(store)
    worker("tasks_async_app:app")
    assert tasks_async_app.slow_double.enqueue(21).result(timeout=30) == 42

    async def produce() -> int:
        ref = await tasks_async_app.plain_triple.enqueue_async(5)
        return await ref.result_async(timeout=30)

    assert asyncio.run(produce()) == 15
    assert sorted((tmp_path / "async-middleware").read_text().splitlines()) == [
        "tasks_async_app.plain_triple 15", "tasks_async_app.slow_double 42"]


def test_an_isolated_worker_refuses_task_handlers_at_start(app, store_url, tmp_path
                                                           ) -> None:
    """A task's handler is a closure its App builds, which a child process cannot import
    by name: `--isolated` is one error line and exit 2, before any job is claimed."""
    ref = tasks_app.add.enqueue(1, 2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["HG_TEST_DIR"] = str(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [*headgate_cmd(), "worker", "--app", "tasks_app:app", "--store", store_url,
         "--isolated"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("headgate: error: cannot run isolated:")
    assert "'tasks_app.add'" in lines[0] and "isolated=False" in lines[0]
    job = app.store.get_job(ref.id)
    assert job.state is State.AVAILABLE and job.attempt == 0


@pytest.mark.parametrize("ref, message", [
    ("tasks_app:always_fails", "is a task, not an app"),  # one parameter: it would run
    ("tasks_app:add", "is a task, not an app"),
    ("tasks_app:_note", "nor a callable taking a store and returning a Worker"),
])
def test_worker_app_pointing_at_a_task_or_function_is_one_error_line(
        app, store_url, tmp_path, ref, message) -> None:
    """A task or a two-argument function is not a store -> Worker factory: one error
    line and exit 2, and the function is not called with the store (always_fails would
    write its note and raise)."""
    ref_job = tasks_app.add.enqueue(1, 2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["HG_TEST_DIR"] = str(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [*headgate_cmd(), "worker", "--app", ref, "--store", store_url],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"headgate: error: {ref} "), proc.stderr
    assert message in lines[0]
    assert not list(tmp_path.glob("fails-*"))
    assert app.store.get_job(ref_job.id).state is State.AVAILABLE


def test_an_isolated_in_process_worker_refuses_task_handlers_until_configured(
        app, store) -> None:
    # Refused before it starts, so the same Worker runs once isolation is off.
    worker = app.worker(isolated=True, duties=False)
    with pytest.raises(headgate.InvalidInput, match="'tasks_app.add'"):
        worker.run()
    ref = tasks_app.add.enqueue(2, 3)
    worker.configure(isolated=False).start()
    try:
        assert ref.result(timeout=30) == 5
    finally:
        worker.stop()
