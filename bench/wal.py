"""WAL bytes per job: headgate's W1, W2, W3 beside the physical-limit loops, one engine.

    .venv/bin/python bench/wal.py --store sqlite [--n 20000] [--runs 3] [--policies-too]
    .venv/bin/python bench/wal.py --store pg --pg-url postgresql://…/postgres ...

WAL volume is as the likely lever on both engines, so this measures it for
the harness's workloads, run as bench/peers_headgate.py runs them (its HeadgatePeer:
the same fresh storage, Client calls, worker command line and policies), and for
bench/limits.py's raw loops on headgate's own row, so each ratio is visible:

  W1  Client.enqueue, one job per call              vs  insert_commit
  W2  Client.enqueue_many, 1000 per call             vs  batch_insert
  W3  `headgate worker --concurrency 2` drains N     vs  claim_ack
      waiting jobs (the fill is not metered); the meter stops once the store counts
      N completed, before the worker is stopped, so start-up registration and
      heartbeats during the drain are in, shutdown is not.

How WAL is counted is bench/walmeter.py's docstring: SQLite = growth of the -wal file
with checkpoints held off by a pinned read snapshot (headgate's Checkpointer thread and
the automatic checkpoint still run, and find nothing they may copy), so the figure is
every frame committed, × (1024 + 24) bytes at headgate's page size; PostgreSQL = the
cluster's pg_current_wal_lsn() delta (pg_wal_lsn_diff), plus pg_walinspect's breakdown
by resource manager where it can be created. Nothing is timed here: the pinned SQLite
WAL grows to N × bytes/job, which would slow reads, so timings belong to the other
benches. One JSON line per (row, workload): wal_bytes_per_job median and min–max over
`--runs`, frames per job (SQLite), and the last run's detail; then one line of ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import limits  # noqa: E402
import peers_headgate as ph  # noqa: E402  (puts the harness's common.py on sys.path)
from walmeter import PgWalMeter, SqliteWalMeter  # noqa: E402

import headgate  # noqa: E402

common = ph.common  # the harness's own module, imported by path in peers_headgate

PAIRS = {"W1": "insert_commit", "W2": "batch_insert", "W3": "claim_ack"}


def peer_for(store: str, policies: bool, pg_url: str | None, batch: int) -> Any:
    args = argparse.Namespace(store=store, policies=policies, profile=None, batch=batch,
                              concurrency=2, pg_url=pg_url)
    return ph.HeadgatePeer(args)


def meter_for(peer: Any) -> Any:
    if peer.kind == "sqlite":
        return SqliteWalMeter(peer.url.removeprefix("sqlite:///"))
    return PgWalMeter(peer.url)  # the run's own database (pg_walinspect is created there)


def completed(url: str) -> int:
    store = headgate.open_store(url)
    try:
        return int(store.counts(ph.QUEUE).get("completed", 0))
    finally:
        store.close()


def run_workload(peer: Any, workload: str, n: int, batch: int, tmp: str) -> dict[str, Any]:
    peer.reset()
    if workload == "W3":
        peer.open_producer()
        try:
            peer.fill(n, batch)
        finally:
            peer.close_producer()
        meter = meter_for(peer)
        env = common._worker_env(peer, tmp)
        drain = env["BENCH_DRAIN_FILE"]
        if os.path.exists(drain):
            os.unlink(drain)
        meter.start()
        w = common.WorkerProc(peer.worker_argv(2), env, os.path.join(tmp, "worker.log"))
        try:
            _, done = common.wait_file_size(drain, n * common.DRAIN_REC, 1800, proc=w)
            if done is None:
                raise RuntimeError(f"W3 did not drain {n} jobs; see {tmp}/worker.log")
            deadline = time.monotonic() + 60
            while completed(peer.url) < n:  # the last acks commit after the side effect
                if time.monotonic() > deadline:
                    raise RuntimeError("the store never counted every job completed")
                time.sleep(0.05)
            out = meter.stop()
        finally:
            w.stop()
    else:
        peer.open_producer()
        try:
            if workload == "W1":
                peer.single_loop(range(-50, 0))  # the harness's warm-up, not metered
            else:
                peer.batch_loop([list(range(-10, 0))])
            meter = meter_for(peer)
            meter.start()
            if workload == "W1":
                peer.single_loop(range(n))
            else:
                peer.batch_loop([list(range(s, min(n, s + batch))) for s in range(0, n, batch)])
            out = meter.stop()
        finally:
            peer.close_producer()
    close = getattr(meter, "close", None)
    if close:
        close()
    return out


def summary(name: str, workload: str, n: int, runs: list[dict[str, Any]],
            extra: dict[str, Any]) -> dict[str, Any]:
    per_job = [r["wal_bytes"] / n for r in runs]
    line: dict[str, Any] = {"bench": "wal", "peer": name, "workload": workload, "n": n,
                            "runs": len(runs), "unit": "WAL bytes/job",
                            "wal_bytes_per_job": limits.agg(per_job), **extra}
    if "wal_frames" in runs[-1]:
        line["wal_frames_per_job"] = limits.agg([r["wal_frames"] / n for r in runs], 2)
    line["detail"] = runs[-1]
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--store", choices=("sqlite", "pg"), default="sqlite")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--workloads", default="w1,w2,w3")
    ap.add_argument("--variants", default="plain,policies",
                    help="headgate rows: plain, policies (comma list)")
    ap.add_argument("--no-limits", action="store_true", help="skip the raw loops")
    ap.add_argument("--pg-url", default=None,
                    help="server for --store pg (default: HG_PG, HG_TEST_PG, the harness's)")
    args = ap.parse_args(argv)
    workloads = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    pg_url = ph.admin_pg_url(args.pg_url) if args.store == "pg" else None
    lines: dict[tuple[str, str], float] = {}

    if not args.no_limits:
        raw: Any = limits.SqliteRaw() if args.store == "sqlite" else limits.PgRaw(pg_url or "")
        try:
            for w in workloads:
                loop = PAIRS[w]
                runs = [limits.one_run(raw, loop, args.n, args.batch, "meter")["wal"]
                        for _ in range(args.runs)]
                line = summary(f"limit[{args.store}]", loop, args.n, runs, {"pairs_with": w})
                lines[("limit", w)] = line["wal_bytes_per_job"]["median"]
                print(json.dumps(line), flush=True)
        finally:
            raw.close()

    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        peer = peer_for(args.store, variant == "policies", pg_url, args.batch)
        tmp = str(peer.tmp)
        try:
            for w in workloads:
                runs = [run_workload(peer, w, args.n, args.batch, tmp) for _ in range(args.runs)]
                line = summary(peer.name, w, args.n, runs, {"commit": ph.git_commit()})
                lines[(variant, w)] = line["wal_bytes_per_job"]["median"]
                print(json.dumps(line), flush=True)
        finally:
            peer.cleanup()

    ratios: dict[str, Any] = {}
    for (variant, w), value in lines.items():
        limit = lines.get(("limit", w))
        if variant != "limit" and limit:
            ratios[f"{variant} {w} / {PAIRS[w]}"] = round(value / limit, 2)
        plain = lines.get(("plain", w))
        if variant == "policies" and plain:
            ratios[f"policies {w} / plain {w}"] = round(value / plain, 2)
    print(json.dumps({"bench": "wal", "store": args.store, "ratios": ratios}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
