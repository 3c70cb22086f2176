"""kill -9 of `headgate worker` processes: one job, a loaded fleet, a job that kills
every worker that runs it. Recovery is the surviving processes' own duties (reclaimer
and promoter under duty leases) — the test never calls reclaim itself."""

from __future__ import annotations

import time
from pathlib import Path

from faultkit import (
    Fleet,
    audit,
    backend_of,
    ends,
    enqueue_fx,
    fleet_fixture,  # noqa: F401 - the `fleet` fixture
    jobs_in,
    read_effects,
    record,
    sessions_on,
    tcp_ports,
    unfinished,
    wait_for,
)

import headgate
from headgate import Quarantined, State, Store

LEASE_S = 1.5  # fault_app's lease
DUTY_TTL_S = 3.0  # duty lease: max(3 s, 3 ticks of 200 ms)
# A generous liveness bound for "reclaimed after lease + sweep": the dead process may
# also have held the duty leases (TTL), then the crash backoff (≤ 1.25 s for crash 1)
# and a poll. Everything past ~6 s is slack for a loaded 2-core CI box.
RECOVERY_BOUND_S = DUTY_TTL_S + LEASE_S + 1.25 + 12


def test_kill_9_mid_job_is_reclaimed_by_the_survivors_duties(
    store: Store, fleet: Fleet, tmp_path: Path, store_url: str
) -> None:
    [job_id] = enqueue_fx(store, 1, outcome="hold")
    a = fleet.worker("a", "--duties")
    b = fleet.worker("b", "--duties")
    wait_for(lambda: any(e.event == "start" for e in read_effects(tmp_path)), 30,
             "the job to start")
    job = store.get_job(job_id)
    assert job.state is State.RUNNING and job.fence == 1
    victim, survivor = (a, b) if job.worker_id == "a" else (b, a)
    assert job.worker_id == victim.name
    victim.kill9()
    killed = time.monotonic()

    wait_for(lambda: store.get_job(job_id).state is State.COMPLETED, RECOVERY_BOUND_S,
             "the survivor to reclaim and finish the job")
    recovered_s = time.monotonic() - killed
    job = store.get_job(job_id)
    assert (job.crash_attempt, job.attempt, job.fence) == (1, 0, 2)
    assert job.worker_id == survivor.name
    assert [e["outcome"] for e in job.errors] == ["lease_lost"]
    assert f"worker {victim.name} stopped renewing" in job.errors[0]["error"]
    # The surviving process holds the reclaimer (it took it over if the victim had it).
    holders = {d.name: d.holder for d in store.duty_holders()}
    assert holders["reclaimer"] == survivor.name
    report = audit(store, [job_id], tmp_path)
    assert report.problems == []
    assert survivor.term() == 0
    record("worker kill -9 mid-job (1 job)", backend_of(store_url), faults=1, jobs=1,
           lost=report.lost, duplicate_completions=report.duplicate_completions,
           reruns=report.reruns, runs=report.runs, recover_s=round(recovered_s, 2))


def test_kill_9_of_one_of_two_workers_under_load_loses_and_doubles_nothing(
    store: Store, fleet: Fleet, tmp_path: Path, store_url: str
) -> None:
    n = 500
    ids = enqueue_fx(store, n, ms=30)
    a = fleet.worker("a", "--duties", "--concurrency", "4")
    b = fleet.worker("b", "--duties", "--concurrency", "4")
    wait_for(lambda: ends(tmp_path) >= 150, 60, "150 jobs to finish")
    on_pg = backend_of(store_url) == "pg"
    ports = tcp_ports(a.pid) if on_pg else set()
    assert ports or not on_pg, "the victim has no sessions"
    a.kill9()
    killed = time.monotonic()
    # PostgreSQL finishes a statement whose client died, and its last turn may claim
    # jobs as well as ack them: the snapshot waits for the victim's sessions to end.
    wait_for(lambda: not ports or sessions_on(store_url, ports) == 0, 30,
             "the victim's sessions to end")
    # The store as the dead worker left it: its in-flight jobs still hold its leases.
    orphans = {j.id: j for j in jobs_in(store, "running") if j.worker_id == "a"}
    assert orphans, "the victim had nothing in flight"

    wait_for(lambda: not any(store.get_job(i).state is State.RUNNING for i in orphans),
             RECOVERY_BOUND_S, "the orphaned leases to be reclaimed")
    reclaimed_s = time.monotonic() - killed
    wait_for(lambda: unfinished(store) == 0, 120, "every job to finish")
    drained_s = time.monotonic() - killed

    report = audit(store, ids, tmp_path)
    assert report.problems == []
    assert report.terminal == {"completed": n}
    for job in (store.get_job(i) for i in ids):
        if job.id in orphans:
            # One lost lease, no failure charged; finished by the survivor.
            assert (job.crash_attempt, job.attempt) == (1, 0), job
            assert job.fence == orphans[job.id].fence + 1
            assert [e["outcome"] for e in job.errors] == ["lease_lost"]
            assert job.worker_id == "b"
        else:
            assert (job.crash_attempt, job.attempt, job.errors) == (0, 0, []), job
    assert report.crash_reclaims == len(orphans)
    # A success line of a fence the store did not keep is a run whose ack was refused:
    # the dead worker's, or a survivor's whose lease lapsed under load (it says so).
    survivor_log = b.log().splitlines()
    for e in read_effects(tmp_path):
        if e.event == "end" and e.outcome == "ok" and e.fence != store.get_job(e.job_id).fence:
            assert e.pid == a.pid or any(
                f"job {e.job_id} fx: " in line and ("lease" in line or "no longer" in line)
                for line in survivor_log), e
    assert b.term() == 0
    record("worker kill -9 under load (2 workers)", backend_of(store_url), faults=1,
           jobs=n, lost=report.lost, duplicate_completions=report.duplicate_completions,
           reruns=report.reruns, runs=report.runs, orphaned=len(orphans),
           recover_s=round(reclaimed_s, 2), drain_after_kill_s=round(drained_s, 2))


def test_a_job_that_kills_every_worker_is_quarantined_at_the_crash_limit(
    store: Store, fleet: Fleet, tmp_path: Path, store_url: str
) -> None:
    [poison] = enqueue_fx(store, 1, queue="poison", outcome="poison")
    good = enqueue_fx(store, 20, ms=5)
    steady = fleet.worker("steady", "--duties")  # reclaims; never runs the poison queue
    deaths = 0
    started = time.monotonic()
    while store.get_job(poison).state is not State.QUARANTINED:
        assert deaths < 3, f"still not quarantined after {deaths} crashes"
        victim = fleet.worker(f"victim{deaths}", "--queues", "poison", "--no-duties")
        assert victim.wait(60) == -9  # the handler SIGKILLed its own process
        deaths += 1
        wait_for(lambda d=deaths: store.get_job(poison).crash_attempt == d,
                 RECOVERY_BOUND_S, f"crash {deaths} to be reclaimed")
    quarantined_s = time.monotonic() - started
    job = store.get_job(poison)
    assert (job.crash_attempt, job.attempt, job.fence) == (3, 0, 3)
    assert [e["outcome"] for e in job.errors] == ["lease_lost"] * 3
    assert job.fingerprint in {q.fingerprint for q in store.quarantine_list()}
    # The fingerprint is refused at enqueue; a fresh worker on that queue stays idle.
    try:
        headgate.Client(store).enqueue("fx", store.get_job(poison, True).payload,
                                       queue="poison")
        raise AssertionError("a quarantined fingerprint was accepted")
    except Quarantined:
        pass
    idle = fleet.worker("idle", "--queues", "poison", "--no-duties")
    wait_for(lambda: any(w.worker_id == "idle" and w.polls > 3
                         for w in store.list_workers(60_000)), 30, "the idle worker to poll")
    assert store.get_job(poison).state is State.QUARANTINED
    assert idle.term() == 0
    wait_for(lambda: unfinished(store, "default") == 0, 60, "the good jobs")
    report = audit(store, [poison, *good], tmp_path)
    assert report.problems == []
    assert report.terminal == {"completed": 20, "quarantined": 1}
    assert steady.term() == 0
    record("poison job kills its worker 3 times", backend_of(store_url), faults=3,
           jobs=21, lost=report.lost, duplicate_completions=report.duplicate_completions,
           reruns=report.reruns, runs=report.runs, recover_s=round(quarantined_s, 2))
