"""Expected starts against what happened: a seeded workload, predictions for waiting
jobs, and the start each of them really had.

    .venv/bin/python bench/forecast.py --store sqlite [--jobs 5000] [--samples 200]
    .venv/bin/python bench/forecast.py --store pg --pg-url postgresql://…/postgres ...

The workload (deterministic for a `--seed`): `--jobs` jobs in one queue, spread over
`--tenants` partitions (tenant-0, tenant-1, … drawn from `--seed`, so the partitions'
backlogs differ), all spending from one rate class of `--limit` tokens a second, under a
concurrency limit of `--ceiling` running per partition, run by one in-process worker of
`--concurrency` slots whose handler sleeps `--run-ms`. A warm-up of `--warmup` jobs runs
first so the store has measured the kind's run time.

Predictions: `--rounds` times during the drain, the forecast (headgate/services/forecasting.py,
the same code behind GET /jobs/{id}/admission) is asked for `--samples / --rounds`
waiting jobs drawn (by `--seed`) from the whole backlog; each prediction is kept with the
store's clock at the time. When the queue has drained, each job's actual start (its
`attempted_at_ms`) is read back. Reported: the share whose actual start fell inside the
predicted p10–p90 range (`hit_rate`) and the median absolute error of the point
estimate, in ms and relative to the actual wait.

What-if (`--double`): at the first round the simulation of the doubled limit
(POST /simulate's code) gives the backlog's time to drain at twice the limit; the same
workload then runs again on a fresh database with the limit doubled, and its actual
time to drain from the same backlog is reported beside it (and the model's own
prediction of that run at its first round).

One JSON object on stdout. Figures, not assertions: nothing here fails on a miss.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import headgate  # noqa: E402
from headgate.core import JobFilter, State  # noqa: E402
from headgate.core.forecast import Change  # noqa: E402
from headgate.services.forecasting import Forecaster  # noqa: E402

QUEUE = "bench-forecast"
CLASS = "bench-forecast"
KIND = "bench.forecast"


@contextmanager
def fresh_store(engine: str, pg_url: str | None) -> Iterator[Any]:
    if engine == "sqlite":
        with tempfile.TemporaryDirectory(prefix="hg-forecast-") as tmp:
            store = headgate.open_store(f"sqlite:///{tmp}/bench.db")
            try:
                yield store
            finally:
                store.close()
        return
    import psycopg  # only for PostgreSQL

    assert pg_url, "--pg-url is required with --store pg"
    name = f"hg_forecast_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(pg_url)
    store = headgate.open_store(urlunsplit((parts.scheme, parts.netloc, "/" + name,
                                            parts.query, parts.fragment)))
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def workload(args: argparse.Namespace) -> list[str]:
    """Each job's partition, drawn from `--seed` with unequal tenant shares."""
    rnd = random.Random(args.seed)
    shares = [rnd.uniform(0.5, 1.5) for _ in range(args.tenants)]
    tenants = [f"tenant-{i}" for i in range(args.tenants)]
    return rnd.choices(tenants, weights=shares, k=args.jobs)


def start_worker(store: Any, args: argparse.Namespace) -> Any:
    pause = args.run_ms / 1000

    def handler(_job: Any, _ctx: Any) -> None:
        time.sleep(pause)

    worker = headgate.Worker(store, queues=[QUEUE], concurrency=args.concurrency,
                             duties=False, heartbeat_ms=500)
    worker.register(KIND, handler)
    return worker.start()


def waiting_ids(store: Any) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = store.list_jobs(JobFilter(queue=QUEUE, state="available"), cursor, 200)
        ids.extend(j.id for j in page.jobs)
        if not page.next_cursor:
            return ids
        cursor = page.next_cursor


def one_run(args: argparse.Namespace, limit: int, *, sample: bool,
            backlog: int | None = None) -> dict[str, Any]:
    """The workload at `limit`. With `backlog`, the drain is timed from the moment the
    waiting jobs are down to that many (the other run's first round), so both runs
    drain the same backlog."""
    rnd = random.Random(args.seed + 1)
    with fresh_store(args.store, args.pg_url) as store:
        store.upsert_rate_class(CLASS, limit, 1000, limit)
        store.upsert_concurrency_limit("bench-forecast-ceiling", QUEUE, args.ceiling)
        producer = headgate.Client(store)
        worker = start_worker(store, args)
        try:
            # Warm-up: the kind's run time measured before any prediction.
            for i in range(args.warmup):
                producer.enqueue(KIND, f"w{i}".encode(), queue=QUEUE, rate_class=CLASS,
                                 partition_key="warmup")
            deadline = time.monotonic() + 300
            while store.counts(QUEUE).get("completed", 0) < args.warmup:
                if time.monotonic() > deadline:
                    raise RuntimeError("the warm-up did not finish")
                time.sleep(0.05)
            worker.stop(wait=True)
            # The backlog, all at once, while nothing runs; then the worker again.
            parts = workload(args)
            for start in range(0, len(parts), 500):
                producer.enqueue_many([
                    headgate.Envelope(kind=KIND, payload=f"j{i}".encode(), queue=QUEUE,
                                      rate_class=CLASS, partition_key=parts[i])
                    for i in range(start, min(start + 500, len(parts)))])
            worker = start_worker(store, args)
            if backlog is None:
                time.sleep(1.0)  # its first heartbeat and first admissions
            else:
                while store.counts(QUEUE).get("available", 0) > backlog:
                    time.sleep(0.01)
            predictions: list[dict[str, Any]] = []
            drain: dict[str, Any] = {}
            per_round = max(1, args.samples // args.rounds)
            for r in range(args.rounds):
                ids = waiting_ids(store)
                if not ids:
                    break
                f = Forecaster(store)
                if r == 0:
                    t0 = store.now_ms()
                    sim = f.simulate(Change(rate_class=CLASS, limit=limit * 2))
                    drain = {"at_ms": t0, "backlog": store.counts(QUEUE)["available"],
                             "predicted_ms": sim.before.ms,
                             "predicted_p10_ms": sim.before.p10_ms,
                             "predicted_p90_ms": sim.before.p90_ms,
                             "simulated_double_ms": sim.after.ms,
                             "simulated_double_p10_ms": sim.after.p10_ms,
                             "simulated_double_p90_ms": sim.after.p90_ms}
                if sample:
                    chosen = rnd.sample(ids, min(per_round, len(ids)))
                    jobs = [j for j in (store.get_job(i) for i in chosen) if j is not None]
                    now = store.now_ms()
                    for job_id, p in f.predict_jobs(jobs).items():
                        if p.ms is not None:
                            predictions.append({"id": job_id, "at_ms": now, "ms": p.ms,
                                                "p10_ms": p.p10_ms, "p90_ms": p.p90_ms,
                                                "bound": p.bound})
                time.sleep(args.round_gap_s)
            deadline = time.monotonic() + args.timeout_s
            while True:
                c = store.counts(QUEUE)
                if not c.get("available", 0) and not c.get("running", 0):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the backlog did not drain in time")
                time.sleep(0.1)
            finished = max(j.finalized_at_ms or 0 for j in store.list_jobs(
                JobFilter(queue=QUEUE, state="completed"), None, 1).jobs)
            drain["actual_ms"] = finished - drain["at_ms"] if drain else None
        finally:
            worker.stop(wait=True)
        out = score(store, predictions) if sample else {}
        return {"limit": limit, "drain": drain, **out}


def score(store: Any, predictions: list[dict[str, Any]]) -> dict[str, Any]:
    hits, errors, rel = 0, [], []
    for p in predictions:
        job = store.get_job(p["id"])
        if job is None or job.attempted_at_ms is None or job.state is not State.COMPLETED:
            continue
        actual = job.attempted_at_ms - p["at_ms"]
        hits += p["p10_ms"] <= actual <= p["p90_ms"]
        errors.append(abs(actual - p["ms"]))
        rel.append(abs(actual - p["ms"]) / max(actual, 1))
    n = len(errors)
    return {
        "predictions": n,
        "hit_rate": round(hits / n, 3) if n else None,
        "median_abs_error_ms": round(statistics.median(errors)) if n else None,
        "median_rel_error": round(statistics.median(rel), 3) if n else None,
        "bounds": sorted({p["bound"] for p in predictions}),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--store", choices=("sqlite", "pg"), default="sqlite")
    ap.add_argument("--pg-url", default=os.environ.get("HG_BENCH_PG"))
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--tenants", type=int, default=3)
    ap.add_argument("--limit", type=int, default=100, help="rate class tokens a second")
    ap.add_argument("--ceiling", type=int, default=4, help="running per partition")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--run-ms", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--round-gap-s", type=float, default=3.0)
    ap.add_argument("--timeout-s", type=float, default=1800)
    ap.add_argument("--seed", type=int, default=45)
    ap.add_argument("--double", action="store_true",
                    help="also run the workload at twice the limit (the what-if's check)")
    args = ap.parse_args(argv)
    result: dict[str, Any] = {
        "engine": args.store, "jobs": args.jobs, "tenants": args.tenants,
        "limit_per_s": args.limit, "ceiling": args.ceiling,
        "concurrency": args.concurrency, "run_ms": args.run_ms, "seed": args.seed,
    }
    result["run"] = one_run(args, args.limit, sample=True)
    if args.double:
        doubled = one_run(args, args.limit * 2, sample=False,
                          backlog=result["run"]["drain"].get("backlog"))
        result["doubled_run"] = doubled
        sim = result["run"]["drain"].get("simulated_double_ms")
        real = doubled["drain"].get("actual_ms")
        if sim and real:
            drain = result["run"]["drain"]
            result["what_if_rel_error"] = round(abs(sim - real) / real, 3)
            result["what_if_in_range"] = (drain["simulated_double_p10_ms"] <= real
                                          <= drain["simulated_double_p90_ms"])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
