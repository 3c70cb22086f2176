"""kill -9 of a `headgate serve` process that holds the duty leases: a second serve
on the same database takes every duty over within one duty-lease period, which shows
as a due scheduled job promoted and an expired job lease reclaimed by the survivor."""

from __future__ import annotations

import time
from pathlib import Path

from faultkit import (
    Fleet,
    backend_of,
    fleet_fixture,  # noqa: F401 - the `fleet` fixture
    record,
    wait_for,
)

import headgate
from headgate import State, Store
from headgate.services.duties import DEFAULT_INTERVALS, MIN_TTL_MS

# serve's duty leases: TTL = max(MIN_TTL_MS, 3 intervals) for the 1 s duties.
DUTY_TTL_S = max(MIN_TTL_MS / 1000, 3 * DEFAULT_INTERVALS["reclaimer"])
TICK_S = DEFAULT_INTERVALS["reclaimer"]
FAST_DUTIES = ("reclaimer", "promoter", "scheduler")


def live_holders(store: Store) -> dict[str, str]:
    now = store.now_ms()
    return {d.name: d.holder for d in store.duty_holders() if d.expires_at_ms > now}


def holder_pid(holder: str) -> int:
    return int(holder.split(":")[1])  # host:pid:random


def test_kill_9_of_the_serve_holding_duties_hands_them_over_within_one_lease(
    store: Store, fleet: Fleet, tmp_path: Path, store_url: str
) -> None:
    first = fleet.serve("serve-a")
    wait_for(lambda: set(FAST_DUTIES) <= set(live_holders(store)), 30,
             "the first server to take the duties")
    second = fleet.serve("serve-b")
    time.sleep(2 * TICK_S)
    # The server holding the reclaimer is the one to kill (normally it holds them all:
    # the second only competes for a duty once its lease has expired).
    reclaimer_pid = holder_pid(live_holders(store)["reclaimer"])
    owner, other = (first, second) if reclaimer_pid in first.worker_pids() \
        else (second, first)
    assert reclaimer_pid in owner.worker_pids()
    survivor_pids = other.worker_pids()

    client = headgate.Client(store)
    # Work for the duties once the owner is gone: a scheduled job that falls due right
    # after the kill, and a job whose (test-held) lease runs out right after it.
    due_at = store.now_ms() + 1000
    scheduled = client.enqueue("duty.probe", b"scheduled", queue="probe",
                               scheduled_at_ms=due_at)
    leased = client.enqueue("duty.probe", b"leased", queue="leased")
    [claim] = store.admit("crashed-worker", ["leased"], 1, lease_ms=500)
    assert claim.job.id == leased

    owner.kill9()
    killed = time.monotonic()
    for duty in FAST_DUTIES:
        wait_for(lambda d=duty: holder_pid(live_holders(store).get(d, "x:0:x"))
                 in survivor_pids, DUTY_TTL_S + TICK_S + 10,
                 f"the survivor to take {duty}")
    handover_s = time.monotonic() - killed
    wait_for(lambda: store.get_job(scheduled).state is State.AVAILABLE, DUTY_TTL_S + 10,
             "the survivor's promoter to promote the due job")
    promoted_s = time.monotonic() - killed
    wait_for(lambda: store.get_job(leased).crash_attempt == 1, DUTY_TTL_S + 10,
             "the survivor's reclaimer to reclaim the expired lease")
    reclaimed_s = time.monotonic() - killed

    job = store.get_job(leased)
    assert job.state in (State.RETRYABLE, State.AVAILABLE)  # crash backoff, then promoted
    assert (job.attempt, job.lease_id) == (0, None)
    assert [e["outcome"] for e in job.errors] == ["lease_lost"]
    assert other.running()
    record("serve kill -9 (duty holder, 2 servers)", backend_of(store_url), faults=1,
           jobs=2, lost=0, duplicate_completions=0, reruns=0,
           recover_s=round(max(handover_s, promoted_s, reclaimed_s), 2),
           duty_handover_s=round(handover_s, 2))
