"""The duty runner (docs/ARCHITECTURE.md, Duties): duty leases across processes,
hand-over, failing duties, and the maintenance duties' effects (retention, stale
workers, queue depth). The store primitives under them (duty leases, prune) are
headgate/testing/conformance/test_port_duties.py and test_port_retention.py.

Multi-process tests spawn real interpreters running a small script on one SQLite file
and kill them with real signals; everything runs on the real clock.
"""

from __future__ import annotations

import json
import logging
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import headgate
from headgate import Client, Outcome, Store
from headgate.core.records import WorkerBeat
from headgate.services import duties as duties_module
from headgate.services.client import EnqueueContext
from headgate.services.duties import MIN_TTL_MS, STANDARD_DUTIES, DutyRunner
from headgate.services.scheduling import tick_job_id

FAST = 0.2  # seconds between ticks in these tests
FAST_INTERVALS = {name: FAST for name in STANDARD_DUTIES}
LEASE_S = max(MIN_TTL_MS / 1000, 3 * FAST)

SCRIPT = textwrap.dedent("""
    import json, signal, sys, threading
    import headgate
    from headgate.services.duties import DutyRunner, STANDARD_DUTIES

    store = headgate.open_store(sys.argv[1], migrate=False)
    runner = DutyRunner(store, holder=sys.argv[2],
                        intervals={name: 0.2 for name in STANDARD_DUTIES})
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    runner.start()
    print("started", flush=True)
    done.wait()
    runner.stop()
    print(json.dumps(runner.stats_dict()), flush=True)
""")


@pytest.fixture
def db_url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path}/duties.db"
    headgate.open_store(url).close()  # migrate once, before any process starts
    yield url


@pytest.fixture
def spawn(tmp_path: Path, db_url: str) -> Iterator:
    script = tmp_path / "duty_process.py"
    script.write_text(SCRIPT)
    procs: list[subprocess.Popen[str]] = []

    def _spawn(holder: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(script), db_url, holder], stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        return proc

    yield _spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def stop(proc: subprocess.Popen[str]) -> dict[str, dict]:
    """SIGTERM, then the stats the process printed on its way out."""
    proc.send_signal(signal.SIGTERM)
    return stats_of(proc)


def stats_of(proc: subprocess.Popen[str]) -> dict[str, dict]:
    """The stats a signalled process printed on its way out."""
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


def holders(store: Store) -> dict[str, str]:
    now = store.now_ms()
    return {d.name: d.holder for d in store.duty_holders() if d.expires_at_ms > now}


def wait_for(predicate, timeout: float, step: float = 0.05) -> float:
    """Seconds until predicate() held; fails after `timeout`."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(step)
    return time.monotonic() - start


def periodic_ticks(store: Store, schedule_id: str) -> list[int]:
    ticks, cursor = [], None
    while True:
        page = store.list_jobs(headgate.JobFilter(), cursor=cursor, limit=200)
        ticks += [j.periodic_tick_ms for j in page.jobs if j.periodic_schedule_id == schedule_id]
        if page.next_cursor is None:
            return sorted(t for t in ticks if t is not None)
        cursor = page.next_cursor


# -- across processes -----------------------------------------------------------------


def test_two_processes_run_each_duty_once_and_fire_each_tick_once(
    spawn, db_url: str
) -> None:
    store = headgate.open_store(db_url, migrate=False)
    # Every second (6 fields); backfill covers any tick a lease hand-over straddles.
    store.upsert_schedule({"id": "every-second", "kind": "beat", "spec": "* * * * * *",
                           "on_missed": "backfill", "backfill_limit": 20})
    a, b = spawn("proc-a"), spawn("proc-b")
    time.sleep(10.5)
    live = holders(store)
    # Both at once: a process stopped first releases its leases, and one still running
    # would rightly take them over for a tick before its own stop.
    for proc in (a, b):
        proc.send_signal(signal.SIGTERM)
    stats = {"proc-a": stats_of(a), "proc-b": stats_of(b)}
    first_enqueue = store.now_ms()

    duties = [d for d in STANDARD_DUTIES if d in stats["proc-a"]]
    assert {"reclaimer", "promoter", "scheduler", "retention", "worker_aging",
            "history"} <= set(duties)
    assert set(live) == set(duties)
    for duty in duties:
        runs = {p: s[duty]["runs"] for p, s in stats.items()}
        # Exactly one process ran it; the other skipped every tick.
        assert sorted(runs.values())[0] == 0, (duty, runs)
        assert sorted(runs.values())[1] > 0, (duty, runs)
        ran = max(runs, key=runs.__getitem__)
        assert live[duty] == ran
        assert stats[ran][duty]["errors"] == 0
        other = "proc-b" if ran == "proc-a" else "proc-a"
        assert stats[other][duty]["skipped"] > 0

    ticks = periodic_ticks(store, "every-second")
    # One job per tick: no tick twice, no gap, about ten of them.
    assert len(ticks) == len(set(ticks))
    assert ticks == list(range(ticks[0], ticks[-1] + 1000, 1000))
    assert 9 <= len(ticks) <= 12
    assert ticks[-1] <= first_enqueue
    events = store.list_schedule_events("every-second", None, 100)
    assert {e.outcome for e in events} == {"enqueued"}
    assert len(events) == len(ticks)
    store.close()


def test_kill_9_of_holder_hands_duties_over_within_one_lease(spawn, db_url: str) -> None:
    store = headgate.open_store(db_url, migrate=False)
    store.upsert_schedule({"id": "beat", "kind": "beat", "spec": "* * * * * *",
                           "on_missed": "backfill", "backfill_limit": 20})
    a = spawn("proc-a")
    wait_for(lambda: set(holders(store).values()) == {"proc-a"}
             and "scheduler" in holders(store), 5)
    b = spawn("proc-b")
    time.sleep(1.0)
    assert set(holders(store).values()) == {"proc-a"}  # b waits its turn
    a.kill()  # SIGKILL: no release, the lease must expire
    a.wait()
    killed = time.monotonic()
    for duty in ("reclaimer", "promoter", "scheduler", "history"):
        wait_for(lambda d=duty: holders(store).get(d) == "proc-b",
                 LEASE_S + FAST + 1.5 - (time.monotonic() - killed))
    handover = time.monotonic() - killed
    assert handover <= LEASE_S + FAST + 1.5
    time.sleep(1.5)
    stats_b = stop(b)
    assert stats_b["scheduler"]["runs"] > 0 and stats_b["scheduler"]["skipped"] > 0
    ticks = periodic_ticks(store, "beat")
    # Across the kill: every tick exactly once (the gap was backfilled by b).
    assert ticks == list(range(ticks[0], ticks[-1] + 1000, 1000))
    assert len(ticks) >= 5
    store.close()


# -- in one process --------------------------------------------------------------------


def test_stop_and_resign_release_leases_for_the_next_tick(db_url: str) -> None:
    s1, s2 = headgate.open_store(db_url, migrate=False), headgate.open_store(db_url,
                                                                             migrate=False)
    r1 = DutyRunner(s1, holder="r1", intervals=FAST_INTERVALS, duties=["promoter"])
    r2 = DutyRunner(s2, holder="r2", intervals=FAST_INTERVALS, duties=["promoter"])
    try:
        r1.start()
        wait_for(lambda: r1.held() == ["promoter"], 3)
        r2.start()
        time.sleep(0.5)
        assert r2.held() == [] and holders(s1)["promoter"] == "r1"
        # Resigning hands over within a tick, far sooner than the 3 s lease.
        r1.resign(cooldown_ms=1500)
        assert wait_for(lambda: holders(s1).get("promoter") == "r2", 1.0) < 1.0
        assert r1.held() == []
        # Stopping the holder does the same the other way round, once r1 competes again.
        time.sleep(1.6)
        r2.stop()
        assert wait_for(lambda: holders(s1).get("promoter") == "r1", 1.0) < 1.0
    finally:
        r1.stop()
        r2.stop()
        s1.close()
        s2.close()


def duty_records(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "headgate.duties" and r.getMessage().startswith(f"duty {name}")]


def test_a_failing_duty_runs_again_and_others_keep_running(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="headgate.duties")
    store = headgate.open_store(db_url, migrate=False)
    calls: list[float] = []
    healthy = threading.Event()

    def flaky() -> None:
        calls.append(time.monotonic())
        if not healthy.is_set():
            raise RuntimeError("boom")

    runner = DutyRunner(store, holder="solo", intervals=FAST_INTERVALS,
                        duties=["promoter", "history"])
    runner.run_duty("flaky", flaky, interval_ms=100)
    runner.start()
    try:
        wait_for(lambda: len(calls) >= 5, 5)
        assert runner.stats["flaky"].errors >= 5
        assert runner.stats["flaky"].last_error == "RuntimeError: boom"
        assert runner.stats["promoter"].runs >= 2
        assert runner.stats["history"].errors == 0
        # A failure that repeats every tick is logged once (with its traceback), not
        # once a tick; its end is logged too.
        failed = duty_records(caplog, "flaky")
        assert len(failed) == 1 and failed[0].levelno == logging.ERROR, failed
        assert failed[0].exc_info is not None
        healthy.set()
        wait_for(lambda: runner.stats["flaky"].runs >= 1, 5)
        assert "runs again after" in duty_records(caplog, "flaky")[-1].getMessage()
    finally:
        runner.stop()
        store.close()
    assert sorted(holders(store)) == []


def test_an_unreachable_store_is_logged_once_per_duty_not_per_tick(
    tmp_path: Path, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="headgate.duties")
    store = headgate.open_store(db_url, migrate=False, busy_timeout_ms=20)
    runner = DutyRunner(store, holder="solo", duties=[])
    runner.run_duty("tidy", lambda: None, interval_ms=50)
    blocker = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holding the write lock
    runner.start()
    try:
        wait_for(lambda: runner.stats["tidy"].claim_errors >= 5, 10)
        failed = duty_records(caplog, "tidy")
        assert len(failed) == 1 and failed[0].levelno == logging.WARNING, failed
        assert "claim failed" in failed[0].getMessage()
        blocker.execute("COMMIT")
        wait_for(lambda: runner.stats["tidy"].runs >= 1, 5)
        assert "claims work again after" in duty_records(caplog, "tidy")[-1].getMessage()
    finally:
        blocker.close()
        runner.stop()
        store.close()


def test_runner_rejects_unknown_duties(db_url: str) -> None:
    store = headgate.open_store(db_url, migrate=False)
    with pytest.raises(ValueError, match="unknown duty"):
        DutyRunner(store, intervals={"janitor": 1})
    with pytest.raises(ValueError, match="> 0"):
        DutyRunner(store, intervals={"promoter": 0})
    store.close()


# -- runs longer than the lease ------------------------------------------------------------

SHORT_TTL_MS = 300  # with 0.1 s intervals: a run of 1 s outlasts three leases


def test_two_runners_never_run_a_slow_duty_at_once(
    store: Store, open_more, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run outlasting its duty lease was started a second time by the other runner."""
    monkeypatch.setattr(duties_module, "MIN_TTL_MS", SHORT_TTL_MS)
    lock = threading.Lock()
    running: list[str] = []
    overlaps: list[list[str]] = []
    runs: list[str] = []

    def slow(holder: str):
        def run() -> None:
            with lock:
                running.append(holder)
                if len(running) > 1:
                    overlaps.append(list(running))
            time.sleep(1.0)
            with lock:
                running.remove(holder)
                runs.append(holder)
        return run

    runners = []
    for holder in ("a", "b"):
        runner = DutyRunner(open_more(), holder=holder, duties=[])
        runner.run_duty("slow", slow(holder), 100)
        runners.append(runner)
    for runner in runners:
        runner.start()
    wait_for(lambda: len(runs) >= 2, 10)
    for runner in runners:
        runner.stop()
    assert overlaps == []


def test_a_run_that_lost_its_lease_is_told(
    store: Store, open_more, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another holder took the lapsed lease and ran the duty: the old run must stop,
    and its renewals must not take the lease back."""
    monkeypatch.setattr(duties_module, "MIN_TTL_MS", SHORT_TTL_MS)
    started, stopped = threading.Event(), threading.Event()
    runner = DutyRunner(open_more(), holder="a", duties=[])

    def long_run() -> None:
        started.set()
        while runner.still_held("long") and not stopped.is_set():
            time.sleep(0.02)
        stopped.set()

    runner.run_duty("long", long_run, 100)
    runner.start()
    try:
        assert started.wait(5)
        assert runner.still_held("long")
        store.release_duty("long", "a")  # as if the holder stalled past its lease
        assert store.claim_duty("long", "b", 60_000)
        store.release_duty("long", "b")  # b ran it and stepped down
        assert stopped.wait(5)
    finally:
        runner.stop()


def test_two_schedulers_enqueue_each_backfilled_tick_exactly_once(
    store: Store, open_more, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two serve-like runners, backfilling schedules, retention 0 (a finished tick job
    is deleted) and a run slower than the scheduler's lease: the second scheduler fired
    the schedules the first was still firing, and re-enqueued ticks that had run."""
    monkeypatch.setattr(duties_module, "MIN_TTL_MS", SHORT_TTL_MS)
    # A firing enqueues only the most recent backfill_limit due ticks (by design), and a
    # loaded machine holds the slow catch-up run up for over 10 ticks: the limit is above
    # any backlog this test builds, so no tick is dropped whatever the run's length.
    for i in range(3):
        store.upsert_schedule({"id": f"s{i}", "kind": "k", "spec": "@every:100",
                               "on_missed": "backfill", "backfill_limit": 1000})
    time.sleep(1.1)  # the scheduler was down: at least 11 ticks due per schedule
    slow_left = [30]

    def slow_enqueue(context: EnqueueContext, batch: list, call_next) -> list[str]:
        if slow_left[0] > 0:  # the catch-up run lasts over twice the lease
            slow_left[0] -= 1
            time.sleep(0.025)
        return call_next(batch)

    ran: dict[str, int] = {}
    tick_of: dict[str, tuple[str | None, int | None]] = {}
    done = threading.Event()

    def work(worker_store: Store) -> None:
        while not done.is_set():
            claims = worker_store.admit("w", ["default"], 50)
            for claim in claims:
                ran[claim.job.id] = ran.get(claim.job.id, 0) + 1
                tick_of[claim.job.id] = (claim.job.periodic_schedule_id,
                                         claim.job.periodic_tick_ms)
                worker_store.ack(claim, Outcome.SUCCESS)
            if not claims:
                time.sleep(0.005)

    worker = threading.Thread(target=work, args=(open_more(),))
    worker.start()
    runners = [DutyRunner(s, holder=h, duties=["scheduler"], intervals={"scheduler": 0.1},
                          client=Client(s, middleware=[slow_enqueue]))
               for h, s in (("a", open_more()), ("b", open_more()))]
    try:
        runners[0].start()
        time.sleep(0.2)
        runners[1].start()
        # Caught up: each schedule within two ticks of now (at @every:100 a loaded
        # machine may never see all three ahead of the clock at once).
        wait_for(lambda: all(
            store.get_schedule(f"s{i}").next_run_ms > store.now_ms() - 200  # type: ignore[union-attr]
            for i in range(3)), 20)
        time.sleep(0.3)
    finally:
        for runner in runners:
            runner.stop()
        done.set()
        worker.join()
    assert {job_id: n for job_id, n in ran.items() if n > 1} == {}
    for i in range(3):
        ticks = sorted(t for sid, t in tick_of.values() if sid == f"s{i}" and t is not None)
        assert len(ticks) >= 10
        assert ticks == list(range(ticks[0], ticks[-1] + 1, 100))


# -- the duties' effects ----------------------------------------------------------------


def _complete(store: Store, queue: str) -> None:
    for claim in store.admit("w", [queue], capacity=100):
        store.ack(claim, Outcome.SUCCESS)


def test_retention_deletes_only_what_is_due_never_quarantined(
    store: Store, quarantine, all_jobs
) -> None:
    client = Client(store)
    short = [client.enqueue("k", b"%d" % i, queue="short", retention_ms=1500)
             for i in range(3)]
    long = [client.enqueue("k", b"L%d" % i, queue="long", retention_ms=3_600_000)
            for i in range(2)]
    waiting = client.enqueue("k", b"w", queue="idle", retention_ms=1)
    _complete(store, "short")
    _complete(store, "long")
    quarantine(store, "poison", b"x")  # quarantined jobs have a finalized_at too
    runner = DutyRunner(store, holder="ret", intervals=FAST_INTERVALS, duties=["retention"])
    runner.start()
    try:
        time.sleep(0.1)
        assert all(store.get_job(j) is not None for j in short)  # not due yet
        wait_for(lambda: all(store.get_job(j) is None for j in short), 5)
    finally:
        runner.stop()
    left = {j.id: j.state for j in all_jobs(store)}
    assert all(j in left for j in long)
    assert left[waiting] is headgate.State.AVAILABLE
    assert list(left.values()).count(headgate.State.QUARANTINED) == 1


def _beat(store: Store, worker_id: str) -> None:
    store.heartbeat(WorkerBeat(worker_id, host="h", pid=1, queues=("q",), concurrency=1))


def test_stale_workers_older_than_the_bound_are_forgotten(store: Store) -> None:
    _beat(store, "old")
    time.sleep(1.2)
    _beat(store, "young")
    assert store.forget_workers(60_000) == 0
    assert store.forget_workers(600) == 1
    assert [w.worker_id for w in store.list_workers(3_600_000)] == ["young"]
    # The duty does the same with its configured bound.
    time.sleep(1.2)
    _beat(store, "newest")
    runner = DutyRunner(store, holder="age", intervals=FAST_INTERVALS,
                        duties=["worker_aging"], forget_workers_after_ms=600)
    runner.start()
    try:
        wait_for(lambda: "young" not in
                 [w.worker_id for w in store.list_workers(3_600_000)], 3)
    finally:
        runner.stop()
    assert runner.stats["worker_aging"].runs >= 1


def test_history_duty_records_queue_depth_from_counters(store: Store) -> None:
    client = Client(store)
    for i in range(3):
        client.enqueue("k", b"%d" % i, queue="deep")
    client.enqueue("k", b"x", queue="shallow")
    _complete(store, "shallow")
    since = store.now_ms() - 120_000
    runner = DutyRunner(store, holder="hist", intervals=FAST_INTERVALS, duties=["history"])
    runner.start()
    try:
        wait_for(lambda: runner.stats["history"].runs >= 1, 3)
    finally:
        runner.stop()
    assert store.history("deep", since, 60_000)[-1].depth == 3
    assert store.history("shallow", since, 60_000)[-1].depth == 0


def test_scheduler_duty_fires_schedules_with_the_runner_client(store: Store) -> None:
    sources: list[str] = []

    def authorizer(context, env) -> bool:
        sources.append(context.source)
        return True

    row = store.upsert_schedule({"id": "s", "kind": "k", "spec": "@every:200"})
    runner = DutyRunner(store, holder="sched", client=Client(store, authorizer=authorizer),
                        intervals=FAST_INTERVALS, duties=["scheduler"])
    runner.start()
    try:
        wait_for(lambda: len(store.list_schedule_events("s", None, 10)) >= 2, 5)
    finally:
        runner.stop()
    assert set(sources) == {"periodic"}
    jobs = [j for j in store.list_jobs(headgate.JobFilter()).jobs
            if j.periodic_schedule_id == "s"]
    assert len(jobs) >= 2
    for job in jobs:
        assert job.periodic_tick_ms is not None
        assert job.periodic_tick_ms >= row.next_run_ms
        assert job.id == tick_job_id("s", job.periodic_tick_ms)


def test_concurrent_runners_in_threads_share_one_lease(db_url: str) -> None:
    """Many runners racing for one duty: one holder at a time, never two."""
    stores = [headgate.open_store(db_url, migrate=False) for _ in range(4)]
    runners = [DutyRunner(s, holder=f"t{i}", intervals=FAST_INTERVALS, duties=["promoter"])
               for i, s in enumerate(stores)]
    seen: set[tuple[str, ...]] = set()
    stop_probe = threading.Event()

    def probe() -> None:
        while not stop_probe.is_set():
            seen.add(tuple(sorted(r.holder for r in runners if r.held())))
            time.sleep(0.01)

    watcher = threading.Thread(target=probe)
    for r in runners:
        r.start()
    watcher.start()
    time.sleep(1.5)
    stop_probe.set()
    watcher.join()
    totals = [r.stats["promoter"].runs for r in runners]
    for r in runners:
        r.stop()
    for s in stores:
        s.close()
    assert sum(1 for t in totals if t > 0) == 1
    assert all(len(h) <= 1 for h in seen)


# -- headgate serve ----------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path: Path, db: Path, *extra: str) -> subprocess.Popen[bytes]:
    import os
    import urllib.request

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    log = open(tmp_path / f"serve-{port}.log", "wb")  # noqa: SIM115 - closed with the proc
    proc = subprocess.Popen(
        [sys.executable, "-m", "headgate.cli", "serve", "--addr", f"127.0.0.1:{port}",
         "--store", f"sqlite:///{db}", *extra],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError((tmp_path / f"serve-{port}.log").read_text()) from None
            time.sleep(0.1)


def _holder_pids(store: Store) -> dict[str, int]:
    return {name: int(holder.split(":")[1]) for name, holder in holders(store).items()}


def _worker_pids(master: subprocess.Popen[bytes]) -> set[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(master.pid)],
                         capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def test_two_serve_processes_share_duties_and_hand_over_on_shutdown(
    tmp_path: Path, db_url: str
) -> None:
    db = Path(db_url.removeprefix("sqlite:///"))
    store = headgate.open_store(db_url, migrate=False)
    first = _serve(tmp_path, db)
    second = _serve(tmp_path, db)
    quiet = _serve(tmp_path, db, "--no-duties")
    try:
        wait_for(lambda: {"reclaimer", "promoter", "scheduler"} <= set(holders(store)), 10)
        time.sleep(1.5)
        pids = _holder_pids(store)
        workers = {proc: _worker_pids(proc) for proc in (first, second, quiet)}
        owner = next(p for p in (first, second) if pids["scheduler"] in workers[p])
        other = second if owner is first else first
        assert not set(pids.values()) & workers[quiet]
        # Each duty is held by exactly one serve process.
        assert set(pids.values()) <= workers[first] | workers[second]
        # A graceful stop releases the leases: the other server takes them within a tick
        # or two (interval 1 s), well before the lease TTL would expire.
        owner.send_signal(signal.SIGTERM)
        owner.wait(timeout=20)
        stopped = time.monotonic()
        wait_for(lambda: _holder_pids(store).get("scheduler") in workers[other], 2.5)
        assert time.monotonic() - stopped < 2.5
    finally:
        for proc in (first, second, quiet):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=20)
        store.close()


def test_one_retention_tick_keeps_pruning_past_a_batch_count(store: Store) -> None:
    """A tick prunes batch after batch until its time budget, not for a fixed number of
    batches: a count (10 of 1,000 every 10 s) capped pruning at 1,000 jobs/s, and a
    faster workload's finished jobs then piled up for good. Here batches of 10 and one
    tick in an hour: all 150 expired jobs go in that first tick."""
    client = Client(store)
    ids = [client.enqueue("k", b"%d" % i, queue="old", retention_ms=1) for i in range(150)]
    for _ in range(2):
        _complete(store, "old")
    assert all(store.get_job(j).state is headgate.State.COMPLETED for j in ids)
    time.sleep(0.05)  # past their 1 ms retention
    runner = DutyRunner(store, holder="ret", intervals={"retention": 3600.0},
                        duties=["retention"], batch_size=10, drain_budget_s=60.0)
    runner.start()
    try:
        wait_for(lambda: all(store.get_job(j) is None for j in ids), 10)
    finally:
        runner.stop()


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import headgate
    store = headgate.open_store(sys.argv[1])
    go = Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.005)
    headgate.Client(store).enqueue("k", b"now", queue="fresh")  # waits for the write lock
    print(store.counts().get("completed", 0), flush=True)
    store.close()
""")


def test_a_retention_tick_lets_another_process_write_between_its_batches(
    tmp_path: Path,
) -> None:
    """On SQLite another process waits for the write lock in SQLite's busy handler,
    which retries after sleeps of up to 100 ms: a retention tick that took the lock
    again at once, batch after batch, kept it out for the whole tick (a worker's claims
    and a producer's enqueues). With a pause after each batch, a write made while the
    tick runs gets in before the tick ends."""
    url = f"sqlite:///{tmp_path / 'ret.db'}"
    store = headgate.open_store(url)
    go = tmp_path / "go"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, url, str(go)],
                              stdout=subprocess.PIPE, text=True)
    try:
        client = Client(store)
        n = 20_000
        client.enqueue_many([headgate.Envelope(kind="k", payload=b"%d" % i, queue="old",
                                               retention_ms=1) for i in range(n)])
        while claims := store.admit("w", ["old"], capacity=500):
            for claim in claims:
                store.ack(claim, Outcome.SUCCESS)
        time.sleep(0.05)  # past their 1 ms retention
        runner = DutyRunner(store, holder="ret", intervals={"retention": 3600.0},
                            duties=["retention"], batch_size=1_000, drain_budget_s=60.0)
        runner.start()
        try:
            wait_for(lambda: store.counts().get("completed", 0) < n - 200, 10)
            go.touch()
            out, _ = writer.communicate(timeout=60)
            wait_for(lambda: store.counts().get("completed", 0) == 0, 60)
        finally:
            runner.stop()
        assert writer.returncode == 0
        assert int(out.split()[-1]) > 0, "the other process waited out the whole tick"
    finally:
        if writer.poll() is None:
            writer.kill()
        store.close()


def test_a_drain_leaves_other_writers_three_quarters_of_the_time(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After each full batch the drain sleeps three times as long as the batch took
    (capped), and after the short batch that ends it, not at all: an equal pause halved
    a worker's claims while a retention tick ran."""
    slept: list[float] = []
    monkeypatch.setattr(duties_module.time, "sleep", slept.append)
    clock = iter([0.0, 0.004, 1.0, 1.010, 2.0, 2.030, 3.0, 3.001])
    monkeypatch.setattr(duties_module.time, "monotonic", lambda: next(clock))
    sizes = iter([5, 5, 5, 2])
    runner = DutyRunner(store, duties=["retention"], batch_size=5, drain_budget_s=60.0)
    assert runner._drain(lambda n: next(sizes)) == 17
    assert slept == pytest.approx([0.012, 0.030, duties_module.DRAIN_PAUSE_MAX_S])


def test_a_negative_drain_budget_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="drain_budget_s"):
        DutyRunner(store, duties=["retention"], drain_budget_s=-1)
