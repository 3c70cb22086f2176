"""Memory: a worker's RSS after 1,000 and after N jobs, and serve's under HTTP load.

    .venv/bin/python bench/memory.py [--stores sqlite,pg] [--jobs 100000] [--runs 3]
        [--serve-requests 20000] [--parts worker,serve]

The target: the later RSS within 10 % of the early one, for both.

worker  N jobs are enqueued first (W2's batches, not measured), then
        `headgate worker --app bench.peer_app:make_worker --concurrency 2` (the W3 worker
        of bench/peers_headgate.py, on fresh storage) drains them. The store's completed
        count is polled every 0.1 s; the worker's RSS is read when it first reaches
        `--early` (1,000) and again when it reaches N.
serve   `headgate serve` (defaults, 16 threads; bench/httpbench.py's server) takes
        bench/http.py's wrk load (8 connections, unique Idempotency-Key per request)
        until the store holds `--serve-requests` jobs; RSS is read when it first holds
        `--early` and at the end. 20,000 by default (not 100,000: about 50 s on SQLite
        and a few minutes on PostgreSQL at this machine's rates).

RSS is VmRSS from /proc summed over the server's or worker's process group (each is
started in its own session, so that is the process and any child it forks). One JSON
line per (part, store): the early and late RSS in MiB and late/early, median and min–max
over `--runs` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import httpbench  # noqa: E402
import limits  # noqa: E402
import peers_headgate as ph  # noqa: E402  (puts the harness's common.py on sys.path)

import headgate  # noqa: E402

common = ph.common


def group_rss_kib(pgid: int) -> int:
    """VmRSS of every process whose process group is `pgid`."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            # pgrp is the 3rd field after the parenthesised command name.
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def poll_until(count: Any, target: int, proc: subprocess.Popen[bytes], timeout: float
               ) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) before {target}")
        if count() >= target:
            return group_rss_kib(proc.pid)
        time.sleep(0.1)
    raise RuntimeError(f"{target} not reached in {timeout:.0f} s")


def worker_run(kind: str, n: int, early: int, pg_url: str | None) -> tuple[int, int]:
    args = argparse.Namespace(store=kind, policies=False, profile=None, batch=1000,
                              concurrency=2, pg_url=pg_url)
    peer = ph.HeadgatePeer(args)
    tmp = str(peer.tmp)
    try:
        peer.reset()
        peer.open_producer()
        try:
            peer.fill(n, 1000)
        finally:
            peer.close_producer()
        env = common._worker_env(peer, tmp)
        store = headgate.open_store(peer.url)
        w = common.WorkerProc(peer.worker_argv(2), env, os.path.join(tmp, "worker.log"))
        try:
            def done() -> int:
                return int(store.counts(ph.QUEUE).get("completed", 0))

            first = poll_until(done, early, w.p, 600)
            last = poll_until(done, n, w.p, 7200)
        finally:
            w.stop()
            store.close()
        return first, last
    finally:
        peer.cleanup()


def serve_run(kind: str, n: int, early: int, pg_url: str) -> tuple[int, int]:
    wrk = httpbench.ensure_wrk()
    log = Path(f"/tmp/hg-memory-serve-{os.getpid()}.log")
    with httpbench.server(kind, 16, 1, pg_url, log) as (base, proc, url):
        assert url is not None
        store = headgate.open_store(url)
        load = subprocess.Popen(
            [wrk, "-t", "2", "-c", "8", "-d", "3600s", "-s", str(httpbench.LUA),
             base + "/api/v1/jobs", "--", uuid.uuid4().hex[:12]],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            def arrived() -> int:
                return sum(store.counts("http").values())

            first = poll_until(arrived, early, proc, 600)
            last = poll_until(arrived, n, proc, 7200)
        finally:
            load.send_signal(signal.SIGINT)
            try:
                load.wait(10)
            except subprocess.TimeoutExpired:
                load.kill()
            store.close()
    return first, last


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--stores", default="sqlite,pg")
    ap.add_argument("--parts", default="worker,serve")
    ap.add_argument("--jobs", type=int, default=100_000, help="the worker's N")
    ap.add_argument("--serve-requests", type=int, default=20_000)
    ap.add_argument("--early", type=int, default=1_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pg-url", default=None,
                    help="server for pg (default: HG_PG, HG_TEST_PG, the harness's)")
    args = ap.parse_args(argv)
    pg_url = ph.admin_pg_url(args.pg_url)
    for part in [p.strip() for p in args.parts.split(",") if p.strip()]:
        for kind in [s.strip() for s in args.stores.split(",") if s.strip()]:
            n = args.jobs if part == "worker" else args.serve_requests
            samples = []
            for _ in range(args.runs):
                if part == "worker":
                    samples.append(worker_run(kind, n, args.early, pg_url))
                else:
                    samples.append(serve_run(kind, n, args.early, pg_url))
            print(json.dumps({
                "bench": "memory", "part": part, "store": kind,
                "row": f"{part}[{kind}]", "early_at": args.early, "late_at": n,
                "runs": args.runs,
                "early_mib": limits.agg([a / 1024 for a, _ in samples]),
                "late_mib": limits.agg([b / 1024 for _, b in samples]),
                "late_over_early": limits.agg([b / a for a, b in samples], 3),
                "target": 1.10}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
