"""Soak: N jobs of random outcomes across 4 `headgate worker` processes that are
SIGKILLed at random and restarted, until every job is terminal.

    HG_SOAK_N=1000000 ./scripts/test.sh tests/faults/test_soak.py

N defaults to 10,000 on each backend (under a minute each on the 2-core CI box);
HG_SOAK_N sets both. At the end: every job is
terminal and none is lost; each completed job's completing fence left exactly one
success line in the side-effect file and its result names that fence (a run killed
before its ack may have run again — at-least-once — but only one run completed it);
`store.counts()` equals a recount of the rows.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from pathlib import Path

import pytest
from faultkit import (
    Fleet,
    WorkerProc,
    all_jobs,
    audit,
    backend_of,
    effects_size,
    fleet_fixture,  # noqa: F401 - the `fleet` fixture
    iter_effects,
    record,
    unfinished,
)

import headgate
from headgate import Store

# The CI sizes (10,000 jobs) take under a minute each; HG_SOAK_N=1,000,000 takes hours
# on PostgreSQL.
_LARGEST_N = int(os.environ.get("HG_SOAK_N", "").strip() or 20_000)
pytestmark = [pytest.mark.soak, pytest.mark.timeout(max(900, _LARGEST_N // 20))]

DEFAULT_N = {"sqlite": 10_000, "pg": 10_000}
WORKERS = 4
CONCURRENCY = 8
LEASE_MS = 3000
KILL_EVERY_S = (1.0, 3.0)
# outcome: weight. `raise` always raises (max_attempts 2: archived); retry, snooze and
# rate_limited end completed on a later run; skip is archived at once.
MIX = {"ok": 60, "retry": 10, "skip": 8, "snooze": 8, "rate_limited": 7, "raise": 7}
EXPECTED = {"ok": "completed", "retry": "completed", "snooze": "completed",
            "rate_limited": "completed", "skip": "archived", "raise": "archived"}


def soak_n(backend: str) -> int:
    raw = os.environ.get("HG_SOAK_N", "").strip()
    return int(raw) if raw else DEFAULT_N[backend]


def enqueue_mix(store: Store, n: int, rng: random.Random) -> dict[str, str]:
    """id → planned outcome. Unique payloads (so unique fingerprints: one crash-looping
    job can only quarantine itself)."""
    nonce = uuid.uuid4().hex[:8]
    kinds = list(MIX)
    weights = list(MIX.values())
    client = headgate.Client(store)
    plan: dict[str, str] = {}
    for start in range(0, n, 1000):
        outcomes = rng.choices(kinds, weights, k=min(1000, n - start))
        envs = [
            headgate.Envelope(
                kind="fx",
                payload=json.dumps({"i": start + i, "n": nonce, "o": o,
                                    "ms": rng.choice((0, 0, 0, 1, 5))}).encode(),
                max_attempts=2 if o == "raise" else 25,
            )
            for i, o in enumerate(outcomes)
        ]
        ids = client.enqueue_many(envs)
        plan.update(zip(ids, outcomes, strict=True))
    return plan


def test_soak_random_outcomes_with_random_worker_kills(
    store: Store, fleet: Fleet, tmp_path: Path, store_url: str
) -> None:
    backend = backend_of(store_url)
    n = soak_n(backend)
    seed = int(os.environ.get("HG_SOAK_SEED", "0") or 0) or random.randrange(1 << 30)
    rng = random.Random(seed)
    plan = enqueue_mix(store, n, rng)
    args = ("--duties", "--concurrency", str(CONCURRENCY), "--lease-ms", str(LEASE_MS))

    generation = 0

    def spawn(slot: int) -> WorkerProc:
        nonlocal generation
        generation += 1
        return fleet.worker(f"soak{slot}-{generation}", *args)

    slots = [spawn(i) for i in range(WORKERS)]
    killed_pids: set[int] = set()
    kills = 0
    started = time.monotonic()
    next_kill = started + rng.uniform(*KILL_EVERY_S)
    last_progress, progress_at = -1, started
    stall_s = 90
    while True:
        left = unfinished(store)
        if left == 0:
            break
        now = time.monotonic()
        done = effects_size(tmp_path)
        if done != last_progress:
            last_progress, progress_at = done, now
        assert now - progress_at < stall_s, (
            f"no job ran for {stall_s} s with {left} unfinished (seed {seed}); last worker "
            f"log:\n{slots[0].tail()}")
        for proc in slots:
            assert proc.killed or proc.running(), f"{proc.name} died:\n{proc.tail()}"
        if now >= next_kill:
            i = rng.randrange(WORKERS)
            slots[i].kill9()
            killed_pids.add(slots[i].pid)
            kills += 1
            slots[i] = spawn(i)
            next_kill = now + rng.uniform(*KILL_EVERY_S)
        time.sleep(0.1)
    drained_s = time.monotonic() - started
    for proc in slots:
        started_up = " starting: " in proc.log()
        code = proc.term()
        # A worker restarted a moment ago may not have installed its SIGTERM handler
        # yet; it holds nothing, so dying by the signal is fine. Once up: exit 0.
        assert code == 0 or (code == -signal.SIGTERM and not started_up), proc.tail()

    report = audit(store, list(plan), tmp_path)
    assert report.problems == [], (seed, report.problems[:20])
    assert report.lost == 0 and report.duplicate_completions == 0
    # Each job ended where its planned outcome leads, or quarantined if it happened to be
    # in flight in three of the killed workers (crash limit).
    by_id = {j.id: j for j in all_jobs(store)}
    wrong = [(i, plan[i], by_id[i].state.value) for i in plan
             if by_id[i].state.value not in (EXPECTED[plan[i]], "quarantined")]
    assert wrong == [], wrong[:10]
    quarantined = sum(1 for j in by_id.values() if j.state.value == "quarantined")
    assert all(j.crash_attempt == 3 for j in by_id.values() if j.state.value == "quarantined")
    # A success line from a fence the store did not keep came from a killed process, or
    # from a live one that lost the lease (renewal late under load): either way its ack
    # was refused by the fence.
    finals = {i: j.fence for i, j in by_id.items()}
    stale = [e for e in iter_effects(tmp_path) if e.event == "end" and e.outcome == "ok"
             and e.job_id in finals and e.fence != finals[e.job_id]]
    from_live = sum(1 for e in stale if e.pid not in killed_pids)
    record(f"soak: random outcomes, {WORKERS} workers SIGKILLed at random", backend,
           faults=kills, jobs=n, lost=report.lost,
           duplicate_completions=report.duplicate_completions, reruns=report.reruns,
           runs=report.runs,
           reruns_by_live_workers=from_live, quarantined=quarantined,
           crash_reclaims=report.crash_reclaims, terminal=report.terminal,
           wall_s=round(drained_s, 1), jobs_per_s=round(n / drained_s), seed=seed)
    print(f"soak {backend}: n={n} kills={kills} runs={report.runs} reruns={report.reruns} "
          f"quarantined={quarantined} terminal={report.terminal} in {drained_s:.1f} s "
          f"(seed {seed})")
