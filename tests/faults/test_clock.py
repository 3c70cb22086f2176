"""A worker whose wall clock is skewed cannot move rate limiting or lease expiry.

The skew: `skew/sitecustomize.py` on the worker's PYTHONPATH makes every
`time.time()` / `time.time_ns()` in that process run an hour ahead (monotonic clocks
untouched, as with a real skew). The worker's registry row proves it took effect: its
`started_at_ms` comes from its own clock.

- PostgreSQL: the store clock is the database's `clock_timestamp()`. The skewed worker's
  leases expire one lease after the DATABASE's now, and the rate-class bucket refills by
  database time, so an hour-ahead worker gets no token the fleet has not earned.
- SQLite is one box with one clock: the store clock is the clock of the process holding
  the write lock, so a process with its own skewed clock DOES write its leases in its
  time (an hour-long lease here; RELIABILITY.md says so). What still holds: the bucket
  is capped at its burst, so an hour of skew mints at most `burst` tokens, never an
  hour's worth, and a writer on the true clock afterwards puts the bucket's refill clock
  back on store time instead of starving the class until the skew has elapsed.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from faultkit import (
    FAULTS_DIR,
    Fleet,
    child_env,
    enqueue_fx,
    fleet_fixture,  # noqa: F401 - the `fleet` fixture
    record,
    wait_for,
)

from headgate import Outcome, State, Store
from headgate.core.records import WorkerRecord

SKEW_S = 3600
LEASE_MS = 1500
RATE = {"limit": 2, "window_ms": 60_000, "burst": 2}  # 1 token per 30 s: none accrues


def skewed_env(tmp_path: Path) -> dict[str, str]:
    env = child_env(tmp_path, HG_FAULT_SKEW_S=str(SKEW_S))
    env["PYTHONPATH"] = f"{FAULTS_DIR / 'skew'}:{env['PYTHONPATH']}"
    return env


def worker_row(store: Store, worker_id: str) -> WorkerRecord | None:
    return next((w for w in store.list_workers(10 * 3_600_000)
                 if w.worker_id == worker_id), None)


def test_a_skewed_worker_cannot_move_rate_limits_or_lease_expiry(
    store: Store, fleet: Fleet, tmp_path: Path, backend: str
) -> None:
    store.upsert_rate_class("skew", **RATE)
    # The fleet (this process, on the true clock) spends the burst.
    spent = enqueue_fx(store, RATE["burst"], rate_class="skew")
    claims = store.admit("fleet", ["default"], 10, lease_ms=60_000)
    assert sorted(c.job.id for c in claims) == sorted(spent)
    for claim in claims:
        store.ack(claim, Outcome.SUCCESS)
    waiting = enqueue_fx(store, 5, rate_class="skew")
    [hold] = enqueue_fx(store, 1, outcome="hold")

    skewed = fleet.worker("skewed", "--no-duties", "--lease-ms", str(LEASE_MS),
                          env=skewed_env(tmp_path))
    wait_for(lambda: store.get_job(hold).state is State.RUNNING, 30,
             "the skewed worker to take the hold job")
    row = wait_for(lambda: worker_row(store, "skewed"), 10, "the skewed worker's row")
    # The shim works: the worker's own idea of its start is an hour ahead of the store.
    assert row.started_at_ms - store.now_ms() > (SKEW_S - 60) * 1000
    wait_for(lambda: getattr(worker_row(store, "skewed"), "polls", 0) >= 10, 30,
             "the skewed worker to poll ten times")

    job = store.get_job(hold)
    lease_left_ms = job.lease_expires_at_ms - store.now_ms()
    ran = [i for i in waiting if store.get_job(i).state is not State.AVAILABLE]
    if backend == "pg":
        # Database clock: one lease from now, however far ahead the worker is.
        assert 0 < lease_left_ms <= LEASE_MS + 1000, lease_left_ms
        # No token was earned in store time, so none was spent.
        assert ran == []
        explained = store.explain_admission(waiting[0])
        assert explained is not None and explained.blocked_by == "rate_class"
        # The killed worker's lease runs out on the database clock.
        skewed.kill9()
        killed = time.monotonic()
        wait_for(lambda: store.now_ms() > job.lease_expires_at_ms, LEASE_MS / 1000 + 5,
                 "the lease to expire in store time")
        assert store.reclaim_expired() == 1
        expired_after_s = time.monotonic() - killed
        assert store.get_job(hold).crash_attempt == 1
        record("worker clock +1 h (lease, rate tokens)", "pg", faults=1, jobs=8, lost=0,
               duplicate_completions=0, reruns=0, recover_s=round(expired_after_s, 2))
        return

    # SQLite: the skewed process held the write lock, so its clock was the store clock.
    assert lease_left_ms > (SKEW_S - 60) * 1000, lease_left_ms
    # An hour ahead refilled the bucket to its burst, not to an hour's worth of tokens.
    wait_for(lambda: sum(store.get_job(i).state is State.COMPLETED for i in waiting)
             >= RATE["burst"], 30, "the burst to be spent")
    time.sleep(1.0)  # more polls: still nothing beyond the burst
    completed = [i for i in waiting if store.get_job(i).state is State.COMPLETED]
    assert len(completed) == RATE["burst"]
    skewed.kill9()
    # Back on the true clock, an admission attempt rebases the bucket's refill clock on
    # store time (no token minted by the clock stepping back, and no hour-long stall).
    assert store.admit("fleet", ["default"], 10) == []
    with sqlite3.connect(store.path) as conn:  # type: ignore[attr-defined]
        refilled_at = conn.execute(
            "SELECT refilled_at_ms FROM rate_classes WHERE name = 'skew'").fetchone()[0]
    assert refilled_at <= store.now_ms()
    [rate] = [r for r in store.rate_classes() if r.name == "skew"]
    assert rate.tokens_available < 1
    record("worker clock +1 h (lease, rate tokens)", "sqlite", faults=1, jobs=8, lost=0,
           duplicate_completions=0, reruns=0, recover_s=None)


def test_a_store_clock_stepping_back_neither_mints_tokens_nor_stalls_the_class(
    store: Store
) -> None:
    """The bucket's refill instant an hour ahead of the store clock (a clock that
    stepped back, or an hour-ahead SQLite writer): the next admission mints nothing and
    rebases it on store time, so the class earns tokens again at its normal rate."""
    store.upsert_rate_class("stepped", limit=10, window_ms=1000, burst=1)
    ids = enqueue_fx(store, 3, rate_class="stepped")
    [first] = store.admit("w", ["default"], 10, lease_ms=60_000)  # spends the burst
    ahead = store.now_ms() + SKEW_S * 1000
    with store.db.write() as (conn, _):  # type: ignore[attr-defined]
        conn.execute("UPDATE rate_classes SET refilled_at_ms = ? WHERE name = 'stepped'",
                     (ahead,))
    assert store.admit("w", ["default"], 10) == []  # nothing minted by the step
    # One token per 100 ms on store time: the class is not stalled for the hour.
    second = wait_for(lambda: store.admit("w", ["default"], 10), 10,
                      "a token to accrue after the step")
    assert len(second) == 1 and {first.job.id, second[0].job.id} < set(ids)
