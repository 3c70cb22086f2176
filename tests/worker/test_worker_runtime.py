"""The worker runtime in-process: context writes and fencing, timeouts, decoding,
isolated children, operator signals and cancellation, drain and release, duties.

Workers here run in a background thread of the test process against the shared
`store` fixture; an operator is simply a second store on the same database.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support import wait_for
from worker_app import FAST, register_all, state_of, worker_maker

import headgate
from headgate import InvalidInput, Job, LeaseLost, Outcome, State, Store, Worker
from headgate.core.records import WorkerRecord
from headgate.worker import DEADLINE_HEADER, EXIT_RESTART, JobContext
from headgate.worker.default_duties import WORKER_DUTIES
from headgate.worker.job_context import AttemptGate


@pytest.fixture
def make_worker(store: Store) -> Iterator[Callable[..., Worker]]:
    """Builds (not starts) workers with the test app's handlers; stops them at the end."""
    yield from worker_maker(store)


class Gate:
    """A handler that blocks until the test opens it, recording what it saw."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.started: list[str] = []
        self.saw_cancel: dict[str, str | None] = {}

    def __call__(self, job: Job, ctx: JobContext) -> bytes:
        self.started.append(job.id)
        deadline = time.monotonic() + 20
        while not self.open.is_set() and time.monotonic() < deadline:
            if ctx.cancelled.wait(0.01):
                self.saw_cancel[job.id] = ctx.cancel_reason
                break
        return b"gate passed"


@contextlib.contextmanager
def sqlite_write_lock(store_url: str) -> Iterator[None]:
    """Another connection holds SQLite's lock: the store can write nothing meanwhile."""
    lock = sqlite3.connect(store_url.removeprefix("sqlite:///"), isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        lock.execute("COMMIT")
        lock.close()


def worker_row(store: Store, worker: Worker) -> WorkerRecord | None:
    return next((w for w in store.list_workers(60_000) if w.worker_id == worker.worker_id),
                None)


# -- context: progress, output, result, fencing ------------------------------------------

def test_progress_output_and_result_written_by_a_handler_are_readable(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    seen: dict[str, Any] = {}
    worker = make_worker()

    def report(job: Job, ctx: JobContext) -> None:
        seen["progress"] = ctx.progress(2, 5, "two of five")
        seen["output"] = ctx.output(b'{"rows": 2}', schema_version=3)
        ctx.set_result(b"final", schema_version=2)
        ctx.logger.info("this success keeps no logs by default")

    worker.register("report", report)
    job_id = headgate.Client(store).enqueue("report", b"")
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.COMPLETED, 10, "completion")
    assert seen == {"progress": True, "output": True}
    progress = store.get_progress(job_id)
    assert (progress.current, progress.total, progress.message, progress.fence) == (
        2, 5, "two of five", 1)
    output = store.get_output(job_id)
    assert (output.bytes, output.schema_version, output.fence) == (b'{"rows": 2}', 3, 1)
    result = store.get_result(job_id)
    assert (result.bytes, result.schema_version) == (b"final", 2)
    assert store.get_job(job_id).errors == []


def test_a_write_from_a_superseded_attempt_is_refused(store: Store) -> None:
    job_id = headgate.Client(store).enqueue("report", b"")
    [old] = store.admit("old-worker", ["default"], 1, lease_ms=30)
    time.sleep(0.05)
    assert store.reclaim_expired() == 1
    store.reschedule_job(job_id, 0)
    [new] = store.admit("new-worker", ["default"], 1, lease_ms=30_000)
    assert new.fence == old.fence + 1

    # The store refuses the old attempt's fenced writes...
    with pytest.raises(LeaseLost):
        store.report_progress(old, 1, 2)
    with pytest.raises(LeaseLost):
        store.write_output(old, b"stale")
    with pytest.raises(LeaseLost):
        store.ack(old, Outcome.SUCCESS)
    # ...and the handler's context turns that into "stop": cancelled, later writes
    # dropped without another round trip.
    gate = AttemptGate()
    ctx = JobContext(store, old, b"", gate, logging.getLogger("t"), "old-worker")
    assert ctx.progress(1, 2) is False
    assert ctx.cancelled.is_set() and ctx.cancel_reason == "lease lost"
    assert ctx.output(b"stale") is False
    # The current attempt writes fine and its values are what readers see.
    store.report_progress(new, 1, 2, "current")
    assert store.get_progress(job_id).message == "current"
    assert store.get_output(job_id) is None


# -- timeouts, deadlines, decoding -------------------------------------------------------

def test_handler_timeout_cancels_it_and_records_a_retry(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    gate = Gate()
    worker = make_worker()
    worker.register("slow", gate, timeout_ms=200)
    job_id = headgate.Client(store).enqueue("slow", b"")
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.RETRYABLE, 10, "the timeout retry")
    job = store.get_job(job_id)
    assert gate.saw_cancel == {job_id: "timed out"}
    assert job.attempt == 1
    assert job.errors[-1]["error"] == "timed out after 200 ms"
    assert job.errors[-1]["outcome"] == "retry"


def test_a_handler_that_ignores_its_timeout_is_recorded_after_the_grace(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    release = threading.Event()

    def stubborn(job: Job, ctx: JobContext) -> None:
        release.wait(20)  # never looks at ctx.cancelled

    worker = make_worker(concurrency=1, timeout_grace_ms=200)
    worker.register("stubborn", stubborn, timeout_ms=100)
    client = headgate.Client(store)
    job_id = client.enqueue("stubborn", b"")
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.RETRYABLE, 5, "the forced record")
    assert store.get_job(job_id).errors[-1]["error"] == "timed out after 100 ms"
    # Its thread is still stuck, so the only slot stays taken: nothing else starts.
    other = client.enqueue("ok", b"")
    time.sleep(0.3)
    assert state_of(store, other) is State.AVAILABLE
    release.set()
    wait_for(lambda: state_of(store, other) is State.COMPLETED, 5, "the slot to free up")


def test_deadlines_skip_jobs_that_are_too_late(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    gate = Gate()
    worker = make_worker()
    worker.register("late", lambda job, ctx: None, deadline_ms=1)
    worker.register("long", gate, deadline_ms=400)
    client = headgate.Client(store)
    late = client.enqueue("late", b"")
    past = client.enqueue("ok", b"", headers={DEADLINE_HEADER: str(store.now_ms() - 1)})
    running = client.enqueue("long", b"")
    time.sleep(0.01)
    worker.start()
    for job_id in (late, past):
        wait_for(lambda j=job_id: state_of(store, j) is State.ARCHIVED, 10, "skip")
        assert store.get_job(job_id).errors[-1]["error"].startswith("deadline passed")
    wait_for(lambda: state_of(store, running) is State.ARCHIVED, 10, "deadline while running")
    assert gate.saw_cancel == {running: "deadline exceeded"}
    assert store.get_job(running).errors[-1]["error"] == "deadline exceeded while running"


def test_unknown_kinds_and_bad_payloads_are_undecodable_and_decoders_upcast(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    client = headgate.Client(store)
    v1 = client.enqueue("user.greet", b'{"user": "ada"}', schema_version=1)
    v2 = client.enqueue("user.hello", b'{"name": "bob", "version": 2}', schema_version=2)
    v3 = client.enqueue("user.greet", b"{}", schema_version=3)
    broken = client.enqueue("user.greet", b"\xff", schema_version=2)
    unknown = client.enqueue("no.such.kind", b"")
    worker = make_worker()
    worker.start()
    wait_for(lambda: all(state_of(store, j) in (State.COMPLETED, State.UNDECODABLE)
                         for j in (v1, v2, v3, broken, unknown)), 10, "all five")
    assert store.get_result(v1).bytes == b"ada@2"   # upcast from version 1
    assert store.get_result(v2).bytes == b"bob@2"   # via the alias kind
    for job_id, text in (
        (v3, "schema_version 3 is newer than this worker understands (2)"),
        (broken, "payload is not valid JSON"),
        (unknown, "no handler for kind 'no.such.kind'"),
    ):
        job = store.get_job(job_id)
        assert job.state is State.UNDECODABLE and job.attempt == 0
        assert job.errors[-1]["error"].startswith(text)


# -- isolated mode ---------------------------------------------------------------------

def test_isolated_child_reports_progress_output_and_result_through_the_parent(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    job_id = headgate.Client(store).enqueue("isolated-report", b"")
    make_worker().start()
    wait_for(lambda: state_of(store, job_id) is State.COMPLETED, 30, "the isolated job")
    progress = store.get_progress(job_id)
    assert (progress.current, progress.total, progress.message) == (3, 4, "three quarters")
    output = store.get_output(job_id)
    assert (output.bytes, output.schema_version) == (b"partial output", 2)
    assert store.get_result(job_id).bytes == b"isolated result"


def test_isolated_child_that_dies_is_a_retry_of_that_attempt(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    job_id = headgate.Client(store).enqueue("isolated-crash", b"")
    worker = make_worker()
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.RETRYABLE, 30, "the crash retry")
    job = store.get_job(job_id)
    assert (job.attempt, job.crash_attempt) == (1, 0)
    assert job.errors[-1]["error"] == "child process died (signal 9, SIGKILL)"
    assert worker.status == "running"  # the worker itself is fine


# Both ignore SIGTERM for 60 s; the chatty one also logs every few milliseconds, which
# must not keep the parent from its kill timer.
@pytest.mark.parametrize("kind", ["isolated-hang", "isolated-chatty"])
def test_isolated_child_that_ignores_sigterm_is_killed_after_the_grace(
    store: Store, make_worker: Callable[..., Worker], kind: str
) -> None:
    worker = make_worker(kill_grace_ms=300)
    worker.configure(timeout_ms=300)
    job_id = headgate.Client(store).enqueue(kind, b"")
    started = time.monotonic()
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.RETRYABLE, 30, "the killed child")
    assert time.monotonic() - started < 10  # not the child's 60 s
    assert store.get_job(job_id).errors[-1]["error"] == "timed out after 300 ms"


def test_an_oversized_progress_message_raises_in_the_handler_in_either_mode(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    client = headgate.Client(store)
    jobs = [client.enqueue(kind, b"")
            for kind in ("oversized-progress", "isolated-oversized-progress")]
    make_worker().start()
    for job_id in jobs:
        wait_for(lambda j=job_id: state_of(store, j) is State.COMPLETED, 30, "the report")
        assert store.get_result(job_id).bytes == b"progress message must be at most 512 bytes"
        assert store.get_progress(job_id) is None


# -- operator signals and cancellation ------------------------------------------------------

def test_quiet_stops_admission_in_flight_finishes_resume_restarts_terminate_stops(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    gate = Gate()
    worker = make_worker(concurrency=2)
    worker.register("gate", gate)
    client = headgate.Client(store)
    held = [client.enqueue("gate", b"") for _ in range(2)]
    worker.start()
    wait_for(lambda: len(gate.started) == 2, 10, "both gated jobs to run")

    store.signal_worker(worker.worker_id, "quiet")
    wait_for(lambda: getattr(worker_row(store, worker), "status", None) == "quiet", 5,
             "quiet ack")
    waiting = client.enqueue("ok", b"")
    gate.open.set()
    wait_for(lambda: all(state_of(store, j) is State.COMPLETED for j in held), 5,
             "in-flight jobs to finish while quiet")
    time.sleep(0.4)
    assert state_of(store, waiting) is State.AVAILABLE

    store.signal_worker(worker.worker_id, "resume")
    wait_for(lambda: state_of(store, waiting) is State.COMPLETED, 5, "admission to resume")
    assert getattr(worker_row(store, worker), "status", None) == "running"

    store.signal_worker(worker.worker_id, "terminate")
    assert worker.join(10) == 0
    row = worker_row(store, worker)
    assert row is not None and (row.status, row.inflight) == ("stopped", 0)


def test_restart_signal_drains_and_exits_with_the_supervisor_code(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    worker = make_worker()
    worker.start()
    wait_for(lambda: worker_row(store, worker), 5, "the first heartbeat")
    store.signal_worker(worker.worker_id, "restart")
    assert worker.join(10) == EXIT_RESTART == 75


def test_operator_cancel_reaches_the_running_handler_and_the_job_ends_cancelled(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    gate = Gate()
    worker = make_worker(lease_ms=30_000)  # only the heartbeat can tell it
    worker.register("gate", gate)
    job_id = headgate.Client(store).enqueue("gate", b"")
    worker.start()
    wait_for(lambda: gate.started == [job_id], 10, "the job to start")
    cancelled_at = time.monotonic()
    store.operator_cancel(job_id)
    wait_for(lambda: job_id in gate.saw_cancel, 5, "the handler to see the cancel")
    assert time.monotonic() - cancelled_at < 1.0  # within a few 100 ms heartbeats
    assert "operator cancel" in gate.saw_cancel[job_id]
    time.sleep(0.2)
    job = store.get_job(job_id)
    # The handler returned normally afterwards; its "success" was not recorded.
    assert job.state is State.CANCELLED and store.get_result(job_id) is None
    assert worker.inflight == 0


def test_stop_releases_unfinished_jobs_without_charging_an_attempt(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    gate = Gate()
    worker = make_worker()
    worker.register("gate", gate)
    held = [headgate.Client(store).enqueue("gate", b"") for _ in range(3)]
    worker.start()
    wait_for(lambda: len(gate.started) == 3, 10, "three running jobs")
    assert worker.stop(drain_ms=200, timeout=10) == 0
    for job_id in held:
        job = store.get_job(job_id)
        assert job.state is State.AVAILABLE
        assert (job.attempt, job.crash_attempt, job.errors) == (0, 0, [])
        assert gate.saw_cancel[job_id] == "released at shutdown"


def test_claims_an_admit_makes_as_the_drain_begins_go_back_uncharged(
    store_url: str, backend: str
) -> None:
    """The dispatcher waits inside an admit (another writer holds SQLite's lock) when
    the stop comes; the jobs it then claims must not be left running until their
    leases expire (each charged a crash)."""
    if backend != "sqlite":
        pytest.skip("takes SQLite's write lock")
    store = headgate.open_store(store_url)
    ran: list[str] = []
    worker = Worker(store, concurrency=2, **{**FAST, "poll_ceiling_ms": 20})
    worker.register("k", lambda job, ctx: ran.append(job.id))
    due = store.now_ms() + 700
    held = [headgate.Client(store).enqueue("k", b"", scheduled_at_ms=due) for _ in range(2)]
    worker.start()
    try:
        time.sleep(0.3)
        lock = sqlite3.connect(store_url.removeprefix("sqlite:///"), isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        time.sleep(0.2)  # the dispatcher's next admit now waits for the lock
        codes: list[int] = []
        stopper = threading.Thread(target=lambda: codes.append(
            worker.stop(drain_ms=3_000, timeout=20)))
        stopper.start()
        time.sleep(0.8)  # the jobs are due by now: the waiting admit will claim them
        lock.execute("COMMIT")
        lock.close()
        stopper.join(30)
        assert codes == [0]
        for job_id in held:
            job = store.get_job(job_id)
            assert job is not None and job.state is State.AVAILABLE, job
            assert (job.attempt, job.crash_attempt, job.errors) == (0, 0, [])
        assert ran == []
    finally:
        worker.stop(drain_ms=0, timeout=15)  # a no-op once stopped
        store.close()


def test_a_stale_attempt_is_stopped_without_touching_the_new_attempt_of_its_job(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    """An operator cancels a running job and retries it at once; the same worker takes
    it again while the first attempt's handler still runs. Only the first is told to
    stop; the second finishes and is recorded."""
    seen: dict[int, str] = {}

    def handler(job: Job, ctx: JobContext) -> bytes:
        if job.fence == 1:
            seen[1] = "cancelled" if ctx.cancelled.wait(20) else "never told"
        else:
            time.sleep(1.0)  # outlives the first attempt's renewal and heartbeat
            seen[job.fence] = "cancelled" if ctx.cancelled.is_set() else "finished"
        return b"done"

    worker = make_worker(concurrency=2, lease_ms=1_500)
    worker.register("twice", handler)
    job_id = headgate.Client(store).enqueue("twice", b"")
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.RUNNING, 10, "the first attempt")
    store.operator_cancel(job_id)
    store.operator_retry(job_id)
    wait_for(lambda: state_of(store, job_id) is State.COMPLETED, 10, "the second attempt")
    job = store.get_job(job_id)
    assert (job.fence, job.crash_attempt) == (2, 0)
    assert seen == {1: "cancelled", 2: "finished"}
    assert store.get_result(job_id).bytes == b"done"


def test_a_stop_hands_an_isolated_job_back_only_after_its_child_is_gone(
    store: Store, make_worker: Callable[..., Worker], tmp_path: Any
) -> None:
    """Released while its child still ran, the job could be taken and run by another
    worker at the same time (the child ignores SIGTERM until the kill grace is over)."""
    marker = tmp_path / "child.pid"
    worker = make_worker(kill_grace_ms=1_000)
    job_id = headgate.Client(store).enqueue("isolated-hang-pid", str(marker).encode())
    worker.start()
    # Created before the child writes its pid into it: wait for the pid.
    wait_for(lambda: marker.exists() and marker.read_text().strip(), 20, "the child to start")
    child = int(marker.read_text())
    seen: list[bool] = []  # was the child alive when the store first said available?

    def watch() -> None:
        while not seen:
            if state_of(store, job_id) is State.AVAILABLE:
                seen.append(pid_alive(child))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    assert worker.stop(drain_ms=100, timeout=20) == 0
    watcher.join(10)
    assert seen == [False]
    job = store.get_job(job_id)
    assert (job.attempt, job.crash_attempt) == (0, 0)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited: it runs nothing
        return stat.read().split(") ")[-1][0] != "Z"


def test_leases_are_renewed_so_a_long_job_outlives_its_lease(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    gate = Gate()
    worker = make_worker(lease_ms=300, duties=True, duty_interval_ms=50)
    worker.register("gate", gate)
    job_id = headgate.Client(store).enqueue("gate", b"")
    worker.start()
    wait_for(lambda: gate.started, 10, "the job to start")
    time.sleep(1.2)  # four leases long, with this worker's own reclaimer sweeping
    assert state_of(store, job_id) is State.RUNNING
    gate.open.set()
    wait_for(lambda: state_of(store, job_id) is State.COMPLETED, 5, "completion")
    job = store.get_job(job_id)
    assert (job.fence, job.crash_attempt, gate.saw_cancel) == (1, 0, {})


def test_duties_run_under_a_lease_and_resign_hands_them_over(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    worker = make_worker(duty_interval_ms=50, resign_cooldown_ms=60_000)  # duties: default
    worker.start()

    wait_for(lambda: held_duties(store) == dict.fromkeys(WORKER_DUTIES, worker.worker_id),
             5, "duty leases")
    # Another process cannot take them while they are held...
    assert store.claim_duty("reclaimer", "someone-else", 1000) is False
    store.signal_worker(worker.worker_id, "resign")
    wait_for(lambda: held_duties(store) == {}, 5, "the duties to be released")
    # ...and after a resign it can, while this worker keeps working.
    assert store.claim_duty("reclaimer", "someone-else", 1000) is True
    job_id = headgate.Client(store).enqueue("ok", b"")
    wait_for(lambda: state_of(store, job_id) is State.COMPLETED, 5, "work after resign")


def held_duties(store: Store) -> dict[str, str]:
    now = store.now_ms()
    return {d.name: d.holder for d in store.duty_holders() if d.expires_at_ms > now}


def test_duties_false_or_a_list_of_names_limits_what_a_worker_holds(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    none = make_worker(duty_interval_ms=50, worker_id="none").start(duties=False)
    some = make_worker(duty_interval_ms=50, worker_id="some", duties=["promoter"])
    some.start()
    wait_for(lambda: held_duties(store) == {"promoter": "some"}, 5, "the promoter lease")
    time.sleep(0.3)  # several more ticks: nobody takes the others
    assert held_duties(store) == {"promoter": "some"}
    assert none.status == some.status == "running"
    with pytest.raises(InvalidInput, match="unknown duty 'reclaimr'"):
        make_worker(duties=["reclaimr"])
    with pytest.raises(InvalidInput, match="duties must be"):
        make_worker(duties=3)


def test_an_idle_worker_in_the_same_process_picks_up_at_once(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    worker = make_worker(poll_ceiling_ms=5_000, probe_interval_ms=1_000)
    seen: list[float] = []
    worker.register("stamp", lambda job, ctx: seen.append(time.monotonic()))
    worker.start()
    time.sleep(1.0)  # idle: the backoff has grown far past the enqueue below
    enqueued = time.monotonic()
    headgate.Client(store).enqueue("stamp", b"")
    wait_for(lambda: seen, 5, "pickup")
    assert seen[0] - enqueued < 0.5  # woken by the store's activity signal, not a 5 s poll


def test_an_idle_worker_notices_another_process_enqueue_before_its_poll_ceiling(
    store: Store, make_worker: Callable[..., Worker], open_more: Callable[[], Store]
) -> None:
    """Another store on the same database has its own activity signal, as another
    process would: the worker learns of its commit by the store's change token (SQLite's
    data_version) or by LISTEN (PostgreSQL), not by a poll that backed off to 5 s."""
    worker = make_worker(poll_floor_ms=5_000, poll_ceiling_ms=5_000, probe_interval_ms=50,
                         idle_after_ms=60_000)
    seen: list[float] = []
    worker.register("stamp", lambda job, ctx: seen.append(time.monotonic()))
    worker.start()
    time.sleep(0.5)  # the first empty poll is behind it: the next one is 5 s away
    enqueued = time.monotonic()
    headgate.Client(open_more()).enqueue("stamp", b"")
    wait_for(lambda: seen, 10, "pickup")
    assert seen[0] - enqueued < 2.0, seen[0] - enqueued


def test_a_locked_database_makes_the_worker_back_off_and_continue(
    store_url: str, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    if backend != "sqlite":
        pytest.skip("takes SQLite's write lock")
    caplog.set_level(logging.INFO, logger="headgate.worker")
    impatient = headgate.open_store(store_url, busy_timeout_ms=50)
    gate = Gate()
    worker = register_all(Worker(impatient, concurrency=2, **FAST))
    worker.register("gate", gate)
    client = headgate.Client(impatient)
    running = client.enqueue("gate", b"")
    worker.start()
    try:
        wait_for(lambda: gate.started, 10, "the job to start")
        with sqlite_write_lock(store_url):
            gate.open.set()  # it finishes while its ack cannot be written
            time.sleep(1.0)  # admits, acks and heartbeats fail meanwhile
        wait_for(lambda: state_of(impatient, running) is State.COMPLETED, 10,
                 "the delayed ack to be written")
        later = client.enqueue("ok", b"")
        wait_for(lambda: state_of(impatient, later) is State.COMPLETED, 10, "new work")
        assert worker.status == "running"
        messages = [r.getMessage() for r in caplog.records if r.name == "headgate.worker"]
        assert any(m.startswith("acking 1 job(s) failed, will retry") for m in messages)
        # A heartbeat every 100 ms failed for a second: logged once, and its end.
        assert len([m for m in messages if m.startswith("heartbeat failed")]) == 1, messages
        wait_for(lambda: any(r.getMessage().startswith("heartbeat works again after")
                             for r in caplog.records), 5, "the heartbeat's recovery")
    finally:
        worker.stop(drain_ms=0, timeout=15)
        impatient.close()


@contextlib.contextmanager
def gated_job_on_an_impatient_store(
    store_url: str, **options: Any
) -> Iterator[tuple[Store, Gate, Worker, str]]:
    """One gated job running on a worker whose store gives up on SQLite's lock after
    50 ms; yields (store, gate, worker, job id) once the job has started."""
    impatient = headgate.open_store(store_url, busy_timeout_ms=50)
    gate = Gate()
    worker = Worker(impatient, **{**FAST, **options})
    worker.register("gate", gate)
    job_id = headgate.Client(impatient).enqueue("gate", b"")
    worker.start()
    try:
        wait_for(lambda: gate.started, 10, "the job to start")
        yield impatient, gate, worker, job_id
    finally:
        worker.stop(drain_ms=0, timeout=15)
        impatient.close()


def test_an_ack_held_back_past_its_lease_is_still_written_when_the_store_returns(
    store_url: str, backend: str
) -> None:
    """The store takes an ack whose lease ran out as long as nobody reclaimed the job:
    an outage longer than a lease must not turn finished work into a re-run."""
    if backend != "sqlite":
        pytest.skip("takes SQLite's write lock")
    with gated_job_on_an_impatient_store(store_url, concurrency=1, lease_ms=600) as (
            impatient, gate, _, job_id):
        with sqlite_write_lock(store_url):
            gate.open.set()  # it finishes while nothing can be written
            time.sleep(1.5)  # well past its 600 ms lease
        wait_for(lambda: state_of(impatient, job_id) is State.COMPLETED, 10, "the ack")
        job = impatient.get_job(job_id)
        assert (job.attempt, job.crash_attempt, job.fence) == (0, 0, 1)
        assert gate.started == [job_id]  # ran once


def test_an_emergency_stop_writes_the_acks_already_decided(
    store_url: str, backend: str
) -> None:
    """A second SIGTERM releases what still runs; a job that already finished (its ack
    waiting for the store) is recorded, not left to expire and run again."""
    if backend != "sqlite":
        pytest.skip("takes SQLite's write lock")
    # A lease that outlives the lock: else the worker's own reclaimer, once the lock is
    # gone, may take the job back before the abort's ack lands (a loaded box).
    with gated_job_on_an_impatient_store(store_url, concurrency=2, lease_ms=10_000) as (
            impatient, gate, worker, finished):
        with sqlite_write_lock(store_url):
            gate.open.set()  # it finishes; its ack is refused, and retried ever more slowly
            time.sleep(2.0)  # the dispatcher's next retry is ~0.5 s or more away
        worker.abort()
        job = impatient.get_job(finished)
        assert job.state is State.COMPLETED, job.state
        assert (job.attempt, job.crash_attempt) == (0, 0)


def test_captured_log_lines_are_bounded_and_kept_with_the_failed_attempt(
    store: Store, make_worker: Callable[..., Worker]
) -> None:
    def chatty(job: Job, ctx: JobContext) -> None:
        ctx.logger.debug("below the capture level")
        for i in range(120):
            ctx.logger.info("step %d", i)
        try:
            raise KeyError("missing")
        except KeyError:
            ctx.logger.exception("lookup failed")
        raise RuntimeError("gave up")

    worker = make_worker(max_log_lines=20)
    worker.register("chatty", chatty)
    job_id = headgate.Client(store).enqueue("chatty", b"", max_attempts=1)
    worker.start()
    wait_for(lambda: state_of(store, job_id) is State.ARCHIVED, 10, "the failure")
    entry = store.get_job(job_id).errors[-1]
    assert entry["error"].startswith("RuntimeError: gave up")
    logs = entry["logs"]
    assert len(logs) == 20
    assert logs[0] == "(102 earlier log lines dropped)"
    assert logs[1:] == [f"INFO step {i}" for i in range(102, 120)] + [
        "ERROR lookup failed [KeyError: 'missing']"]


def test_a_worker_loads_apscheduler_only_when_it_starts_duties(store_url: str) -> None:
    """Producers import headgate (which exports Worker) without APScheduler."""
    script = (
        "import sys, headgate\n"
        "store = headgate.open_store(sys.argv[1])\n"
        "worker = headgate.Worker(store, heartbeat_ms=100)\n"
        "print('apscheduler' in sys.modules)\n"
        "worker.start(); worker.stop(drain_ms=0, timeout=15)\n"
        "print('apscheduler' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, store_url], capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    assert out == ["False", "True"]


def test_a_refused_configure_changes_nothing(store: Store) -> None:
    """configure checks the new settings whole before they replace the old ones, so an
    override refused halfway (the CLI's flags) leaves the worker as it was."""
    worker = Worker(store, queues=["a"], concurrency=10, duties=False)
    with pytest.raises(InvalidInput, match="lease_ms must be at least"):
        worker.configure(queues="b,c", concurrency=4, lease_ms=10)
    assert (worker.queues, worker.concurrency, worker.lease_ms) == (["a"], 10, 30_000)
    worker.configure(queues="b,c,b", concurrency=4)
    assert (worker.queues, worker.concurrency) == (["b", "c"], 4)
    assert worker.config.queues == ("b", "c")
    with pytest.raises(AttributeError):
        worker.config.concurrency = 1  # type: ignore[misc]
