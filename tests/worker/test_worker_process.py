"""`headgate worker` as an operator runs it: real processes, real signals, kill -9.

The app is tests/worker_app.py (`--app worker_app:make_worker`): 1.5 s
leases, 300 ms heartbeats, duties every 200 ms when `--duties` is given.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import headgate_cmd, wait_for

import headgate
from headgate import Envelope, State, Store
from headgate.worker.engine import RELEASED_RETURN_S

TESTS_DIR = Path(__file__).resolve().parents[1]
APP = "worker_app:make_worker"
OUTCOME_LINE = re.compile(r"INFO headgate.worker: job \S+ \S+ run \d+: ")


class WorkerProcess:
    def __init__(self, store_url: str, tmp_path: Path, *args: str, name: str = "w") -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
        env["HG_TEST_DIR"] = str(tmp_path)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
        self.log_path = tmp_path / f"{name}.log"
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [*headgate_cmd(), "worker", "--app", APP, "--store", store_url, *args],
            env=env, cwd=tmp_path, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running; log:\n{self.log()}") from None

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()


@pytest.fixture
def spawn(store_url: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def _spawn(*args: str, name: str = "w") -> WorkerProcess:
        worker = WorkerProcess(store_url, tmp_path, *args, name=f"{name}{len(started)}")
        started.append(worker)
        return worker

    yield _spawn
    for worker in started:
        worker.close()


def started_marker(tmp_path: Path, job_id: str) -> Path:
    return tmp_path / f"{job_id}.started"


# -- 1,000 jobs of mixed outcomes ------------------------------------------------------

MIX = {  # kind: (count, envelope overrides)
    "ok": (400, {}),
    "fail-once": (100, {}),
    "always-fail": (50, {"max_attempts": 2}),
    "skip": (100, {}),
    "revoke": (100, {}),
    "snooze-once": (100, {}),
    "rate-limited-once": (50, {}),
    "retry-fast": (50, {}),
    "user.greet": (25, {}),          # invalid JSON for its decoder
    "nobody-handles-this": (25, {}),
}


def test_cli_worker_runs_1000_mixed_jobs_to_the_states_their_outcomes_dictate(
    store: Store, spawn: Callable[..., WorkerProcess], all_jobs: Callable[..., list]
) -> None:
    envs = []
    for kind, (count, extra) in MIX.items():
        payload = b"{not json" if kind == "user.greet" else b"p"
        envs += [Envelope(kind=kind, payload=payload, **extra) for _ in range(count)]
    ids = headgate.Client(store).enqueue_many(envs)
    assert len(ids) == 1000
    kind_of = {i: e.kind for i, e in zip(ids, envs, strict=True)}

    worker = spawn("--concurrency", "8")

    def settled() -> bool:
        counts = store.counts()
        return sum(counts.get(s, 0) for s in ("available", "running", "retryable",
                                              "scheduled")) == 0
    wait_for(settled, 60, "all 1,000 jobs to reach a final state")
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(30) == 0

    jobs = {j.id: j for j in all_jobs(store)}
    # Revoked jobs are deleted; everything else is still there.
    assert {i for i in ids if i not in jobs} == {i for i in ids if kind_of[i] == "revoke"}
    by_kind: dict[str, Counter] = {}
    for job in jobs.values():
        by_kind.setdefault(job.kind, Counter())[job.state] += 1
    assert by_kind["ok"] == {State.COMPLETED: 400}
    assert by_kind["fail-once"] == {State.COMPLETED: 100}
    assert by_kind["always-fail"] == {State.ARCHIVED: 50}
    assert by_kind["skip"] == {State.ARCHIVED: 100}
    assert by_kind["snooze-once"] == {State.COMPLETED: 100}
    assert by_kind["rate-limited-once"] == {State.COMPLETED: 50}
    assert by_kind["retry-fast"] == {State.COMPLETED: 50}
    assert by_kind["user.greet"] == {State.UNDECODABLE: 25}
    assert by_kind["nobody-handles-this"] == {State.UNDECODABLE: 25}

    for job in jobs.values():
        assert job.crash_attempt == 0 and job.lease_id is None
        if job.kind == "ok":
            assert (job.attempt, job.errors) == (0, [])
            assert store.get_result(job.id).bytes == b"done:p"
        elif job.kind == "fail-once":
            assert job.attempt == 1 and len(job.errors) == 1
            entry = job.errors[0]
            assert entry["outcome"] == "retry"
            assert entry["error"].startswith("RuntimeError: transient failure")
            assert "worker_app.py" in entry["error"]  # the traceback summary
            assert entry["logs"] == [f"WARNING first attempt of {job.id} fails on purpose"]
        elif job.kind == "always-fail":
            assert job.attempt == 2
            assert [e["error"].splitlines()[0] for e in job.errors] == [
                "ValueError: permanent failure on attempt 1",
                "ValueError: permanent failure on attempt 2",
            ]
        elif job.kind == "skip":
            assert job.attempt == 0
            assert [(e["outcome"], e["error"]) for e in job.errors] == [("skip", "not for us")]
        elif job.kind in ("snooze-once", "rate-limited-once"):
            # Neither snooze nor rate_limited consumes an attempt; each ran twice.
            assert (job.attempt, job.fence, job.errors) == (0, 2, [])
        elif job.kind == "retry-fast":
            assert job.attempt == 1 and job.errors[0]["error"] == "upstream busy"
        elif job.kind == "user.greet":
            assert job.errors[0]["error"].startswith("payload is not valid JSON")
        elif job.kind == "nobody-handles-this":
            assert job.errors[0]["error"].startswith(
                "no handler for kind 'nobody-handles-this'")

    log = worker.log()
    # One INFO line per attempt outcome: 1000 first runs + the second runs.
    outcome_lines = [line for line in log.splitlines() if OUTCOME_LINE.search(line)]
    assert len(outcome_lines) == 1000 + 100 + 50 + 100 + 50 + 50
    assert "released" not in log


def test_cli_worker_awaits_an_async_def_handler(
    store: Store, spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    job_id = headgate.Client(store).enqueue("async-mark", b"cli")
    worker = spawn()
    wait_for(lambda: store.get_job(job_id).state is State.COMPLETED, 30, "the async job")
    assert store.get_result(job_id).bytes == b"async:cli"
    assert (tmp_path / f"{job_id}.async-done").read_text() == str(worker.pid)
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(30) == 0


# -- crash recovery ----------------------------------------------------------------------

def test_kill_9_mid_job_is_finished_by_another_worker_after_the_lease_expires(
    store: Store, spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    job_id = headgate.Client(store).enqueue("block", b"")
    first = spawn("--no-duties", name="victim")
    wait_for(started_marker(tmp_path, job_id).exists, 20, "the job to start")
    assert store.get_job(job_id).state is State.RUNNING
    os.kill(first.pid, signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL

    second = spawn("--duties", name="rescuer")  # its reclaimer finds the expired lease
    wait_for(lambda: store.get_job(job_id).state is State.COMPLETED, 30,
             "the second worker to finish the job")
    job = store.get_job(job_id)
    assert (job.crash_attempt, job.attempt, job.fence) == (1, 0, 2)
    assert [e["outcome"] for e in job.errors] == ["lease_lost"]
    assert f":{second.pid}:" in job.worker_id
    os.kill(second.pid, signal.SIGTERM)
    assert second.wait(30) == 0


LEASE_MS = 1000
DUTY_TTL_S = 3.0  # the duty lease's TTL: max(3 s, 3 ticks of the app's 200 ms)
CRASH_BACKOFF_S = 1.25  # at most, before a crash's first re-run


def test_two_cli_workers_and_no_server_recover_a_kill_9_with_their_default_duties(
    store: Store, spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    """No `serve`, no `--duties`: the survivor's own reclaimer and promoter (held under
    duty leases, taken over from the victim if it had them) finish the job."""
    a = spawn("--worker-id", "a", "--lease-ms", str(LEASE_MS), name="a")
    b = spawn("--worker-id", "b", "--lease-ms", str(LEASE_MS), name="b")
    wait_for(lambda: {"a", "b"} <= {w.worker_id for w in store.list_workers(60_000)},
             30, "both workers to register")
    job_id = headgate.Client(store).enqueue("block", b"")
    marker = wait_for(lambda: started_marker(tmp_path, job_id).exists()
                      and started_marker(tmp_path, job_id), 20, "the job to start")
    victim, survivor = (a, b) if int(marker.read_text()) == a.pid else (b, a)
    assert store.get_job(job_id).state is State.RUNNING
    os.kill(victim.pid, signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL

    # Lease + a few seconds: the victim may have held the reclaimer's duty lease too.
    wait_for(lambda: store.get_job(job_id).state is State.COMPLETED,
             LEASE_MS / 1000 + DUTY_TTL_S + CRASH_BACKOFF_S + 5,
             "the surviving worker to reclaim and finish the job")
    job = store.get_job(job_id)
    assert (job.crash_attempt, job.attempt, job.fence) == (1, 0, 2)
    assert [e["outcome"] for e in job.errors] == ["lease_lost"]
    assert job.worker_id == ("b" if survivor is b else "a")
    # The reclaimer ran in the survivor: it took the duty over if the victim held it.
    holders = {d.name: d.holder for d in store.duty_holders()}
    assert holders["reclaimer"] == job.worker_id
    os.kill(survivor.pid, signal.SIGTERM)
    assert survivor.wait(30) == 0


def test_cli_worker_with_no_duties_holds_none(
    store: Store, spawn: Callable[..., WorkerProcess]
) -> None:
    worker = spawn("--worker-id", "quiet", "--no-duties", name="quiet")
    wait_for(lambda: any(w.worker_id == "quiet" and w.polls > 3
                         for w in store.list_workers(60_000)), 30, "the worker to poll")
    time.sleep(0.5)  # a few duty ticks (200 ms) it would have run
    assert [d for d in store.duty_holders() if d.holder == "quiet"] == []
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(30) == 0


def test_job_that_kills_its_worker_three_times_ends_quarantined(
    store: Store, spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    job_id = headgate.Client(store).enqueue("suicide", b"poison")
    for round_ in range(3):
        worker = spawn("--no-duties", "--lease-ms", "500", name=f"poisoned{round_}")
        assert worker.wait(30) == -signal.SIGKILL
        job = store.get_job(job_id)
        assert job.state is State.RUNNING
        wait_for(lambda j=job: store.now_ms() > j.lease_expires_at_ms, 5, "lease expiry")
        assert store.reclaim_expired() == 1
        job = store.get_job(job_id)
        assert job.crash_attempt == round_ + 1
        if job.state is State.RETRYABLE:
            store.reschedule_job(job_id, 0)  # skip the crash backoff
    assert job.state is State.QUARANTINED
    fp = headgate.fingerprint("suicide", b"poison")
    assert job.fingerprint == fp
    assert fp in [q.fingerprint for q in store.quarantine_list()]
    # A fresh worker does not pick it up again.
    assert store.admit("probe", ["default"], 10) == []


# -- graceful shutdown ---------------------------------------------------------------------

def test_released_handlers_get_a_moment_to_return_and_no_more(
    store: Store, spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    """A handler whose job shutdown released is told to stop (ctx.cancelled) and the
    process waits up to RELEASED_RETURN_S for it to return, so a cooperative handler's
    cleanup runs; one that ignores the signal delays the exit by that bound only."""
    client = headgate.Client(store)
    cleaning = client.enqueue("slow-cleanup", b"")
    deaf = client.enqueue("deaf", b"")
    worker = spawn("--drain-ms", "200")
    for job_id in (cleaning, deaf):
        wait_for(started_marker(tmp_path, job_id).exists, 20, "both jobs to start")
    sent = time.monotonic()
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(20) == 0
    took = time.monotonic() - sent
    assert (tmp_path / f"{cleaning}.cleaned").exists()  # its 0.3 s cleanup ran
    assert took < 0.2 + RELEASED_RETURN_S + 3, took  # the deaf one was not waited out
    assert {store.get_job(j).state for j in (cleaning, deaf)} == {State.AVAILABLE}


def test_sigterm_drains_while_renewing_then_releases_without_charging(
    store: Store, spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    client = headgate.Client(store)
    done_id = client.enqueue("ok", b"x")
    blocked = [client.enqueue("block", b"") for i in range(3)]
    worker = spawn("--drain-ms", "2500")
    for job_id in blocked:
        wait_for(started_marker(tmp_path, job_id).exists, 20, "blocked jobs to start")
    wait_for(lambda: store.get_job(done_id).state is State.COMPLETED, 10, "the quick job")

    sent = time.monotonic()
    os.kill(worker.pid, signal.SIGTERM)
    # Draining: the 1.5 s leases must keep being renewed, so nothing is reclaimable.
    time.sleep(2.0)
    assert worker.proc.poll() is None
    assert store.reclaim_expired() == 0
    assert {store.get_job(j).state for j in blocked} == {State.RUNNING}
    late_id = client.enqueue("ok", b"late")  # not admitted while stopping

    assert worker.wait(20) == 0
    assert time.monotonic() - sent >= 2.5
    for job_id in blocked:
        job = store.get_job(job_id)
        assert job.state is State.AVAILABLE
        assert (job.attempt, job.crash_attempt, job.errors) == (0, 0, [])
        assert job.lease_id is None
        # The handler was told to stop when its job was released.
        assert (tmp_path / f"{job_id}.cancelled").exists()
    assert store.get_job(late_id).state is State.AVAILABLE
    log = worker.log()
    assert "released 3 unfinished job(s)" in log
    rows = [w for w in store.list_workers(60_000) if w.pid == worker.pid]
    assert [w.status for w in rows] == ["stopped"]


def test_a_script_calling_worker_run_drains_on_sigterm(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    """The README's `worker.run()`: SIGTERM drains and releases as `headgate worker`
    does, instead of killing the process with its job left running."""
    job_id = headgate.Client(store).enqueue("block", b"")
    script = tmp_path / "run_worker.py"
    script.write_text(
        "import sys, headgate, worker_app\n"
        "worker = worker_app.make_worker(headgate.open_store(sys.argv[1]))\n"
        "worker.configure(drain_ms=300)\n"
        "sys.exit(worker.run())\n"
    )
    env = dict(os.environ, HG_TEST_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    with (tmp_path / "run.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, str(script), store_url], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(started_marker(tmp_path, job_id).exists, 20, "the job to start")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    job = store.get_job(job_id)
    assert job.state is State.AVAILABLE and (job.attempt, job.crash_attempt) == (0, 0)
    assert (tmp_path / f"{job_id}.cancelled").exists()


def test_cli_refuses_a_bad_app_with_exit_code_2(store_url: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [*headgate_cmd(), "worker", "--app", "no_such_module:x", "--store", store_url],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "cannot import 'no_such_module'" in result.stderr


def test_env_configures_the_cli_and_a_second_sigterm_releases_at_once(
    store: Store, store_url: str, tmp_path: Path, backend: str
) -> None:
    if backend != "sqlite":
        pytest.skip("HG_SQLITE names a SQLite file")
    job_id = headgate.Client(store).enqueue("block", b"")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env.update(HG_TEST_DIR=str(tmp_path), HG_STORE="sqlite",
               HG_SQLITE=store_url.removeprefix("sqlite:///"), HG_LEASE_MS="4000",
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")]))
    with (tmp_path / "env.log").open("wb") as log:
        proc = subprocess.Popen([*headgate_cmd(), "worker", "--app", APP], env=env,
                                cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(started_marker(tmp_path, job_id).exists, 20, "the job to start")
        job = store.get_job(job_id)
        # HG_LEASE_MS won over the app's 1500 ms (renewed every 4000/3 ms, so at least
        # two thirds of it are always left).
        assert 2_500 <= job.lease_expires_at_ms - store.now_ms() <= 4_000
        proc.send_signal(signal.SIGTERM)  # drain would wait 30 s for the blocked job...
        time.sleep(0.5)
        assert proc.poll() is None
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # ...a second signal does not
        assert proc.wait(10) == 1
        assert time.monotonic() - stopped < 5
    finally:
        if proc.poll() is None:
            proc.kill()
    job = store.get_job(job_id)
    assert job.state is State.AVAILABLE and (job.attempt, job.crash_attempt) == (0, 0)
