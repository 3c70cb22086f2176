"""Control API benchmark over real HTTP against `headgate serve` (gunicorn gthread).

Builds a SQLite database with `--jobs` jobs (default 1,000,000; batched through the
store's enqueue_many, not timed), starts `headgate serve` on it, then measures:

  enqueue_rps            POST /api/v1/jobs from `--clients` concurrent clients (8), each
                         with keep-alive and a fresh Idempotency-Key per request, for
                         `--seconds` per run
  list_jobs_ms           GET /api/v1/jobs?limit=50             p50 / p99
  counts_ms              GET /api/v1/jobs/counts               p50 / p99
  queues_ms              GET /api/v1/queues                    p50 / p99

Latencies: `--requests` requests per endpoint per run from one client issuing them back
to back (the request's own latency), and again from `--clients` concurrent clients
(`*_c8_*`: the same server under load — one gunicorn process, so Python work queues up
behind the GIL). Each figure is the median over `--runs` runs; one JSON line per metric,
plus one summary line. The target is p99 < 50 ms for the three GETs with
1,000,000 jobs in the database.

Usage:
  .venv/bin/python bench/api.py [--jobs 1000000] [--runs 3] [--clients 8]
      [--seconds 5] [--requests 400] [--db PATH] [--threads 16]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import headgate  # noqa: E402
from headgate import Envelope  # noqa: E402

QUEUES = ("email", "reports", "billing", "default")
PARTITIONS = 20
BUILD_BATCH = 5000
PAYLOAD = b'{"to": "someone@example.com", "template": "welcome", "n": %d}'


def build_database(path: str, jobs: int) -> float:
    """Fill `path` with `jobs` jobs across 4 queues and 20 partitions (10% scheduled,
    5% pending, tagged), in batches through the store. Returns seconds taken."""
    started = time.perf_counter()
    store = headgate.open_store(f"sqlite:///{path}")
    try:
        far = int(time.time() * 1000) + 86_400_000
        done = 0
        while done < jobs:
            n = min(BUILD_BATCH, jobs - done)
            batch = []
            for i in range(done, done + n):
                batch.append(Envelope(
                    kind=f"bench.{QUEUES[i % 4]}", payload=PAYLOAD % i, queue=QUEUES[i % 4],
                    partition_key=f"tenant-{i % PARTITIONS}", tags=("bench",),
                    scheduled_at_ms=far if i % 10 == 0 else 0, pending=i % 20 == 1,
                ).validated())
            store.enqueue_many(batch)
            done += n
            if done % 200_000 == 0:
                print(json.dumps({"building": done}), file=sys.stderr, flush=True)
    finally:
        store.close()
    return time.perf_counter() - started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def headgate_cmd() -> list[str]:
    script = Path(sys.executable).with_name("headgate")
    return [str(script)] if script.exists() else [sys.executable, "-m", "headgate.cli"]


def start_server(db: str, threads: int, *, startup_s: float = 60.0,
                 log_path: str | None = None) -> tuple[subprocess.Popen, str]:
    """`headgate serve` on a free loopback port. `db` is a SQLite file, or a store URL
    (sqlite:///… or postgresql://…). Returns the process and its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    if "://" in db:
        store = ["--store", db]
    else:
        store = []
        env.update(HG_STORE="sqlite", HG_SQLITE=db)
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        [*headgate_cmd(), "serve", "--addr", f"127.0.0.1:{port}", "--threads", str(threads),
         *store],
        env=env, stdout=out, stderr=out,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + startup_s
    while time.monotonic() < deadline:
        try:
            if requests.get(base + "/readyz", timeout=2).status_code == 200:
                return proc, base
        except requests.RequestException:
            pass
        if proc.poll() is not None:
            raise SystemExit("headgate serve exited during start-up")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("headgate serve did not become ready")


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def enqueue_rps(base: str, clients: int, seconds: float) -> float:
    url = base + "/api/v1/jobs"
    stop = time.monotonic() + seconds
    counts = [0] * clients
    errors: list[str] = []

    def client(i: int) -> None:
        session = requests.Session()
        body = {"kind": "bench.http", "payload": "eyJuIjogMX0=", "queue": "http"}
        while time.monotonic() < stop:
            r = session.post(url, json=body, headers={"Idempotency-Key": uuid.uuid4().hex},
                             timeout=30)
            if r.status_code == 201:
                counts[i] += 1
            else:
                errors.append(f"{r.status_code} {r.text[:100]}")

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    if errors:
        print(json.dumps({"enqueue_errors": len(errors), "first": errors[0]}), file=sys.stderr)
    return sum(counts) / elapsed


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation, as numpy's default."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def latencies(base: str, path: str, clients: int, requests_total: int,
              budget_s: float | None = None, min_requests: int = 20) -> tuple[float, float]:
    """p50/p99 (ms) of `requests_total` GETs of `path` spread over `clients` keep-alive
    clients. With `budget_s`, a client stops early once it has spent that long and made
    at least `min_requests` requests (so one slow page cannot stall a whole run)."""
    p50, p99, _ = latency_samples(base, path, clients, requests_total, budget_s, min_requests)
    return p50, p99


def latency_samples(base: str, path: str, clients: int, requests_total: int,
                    budget_s: float | None = None, min_requests: int = 20
                    ) -> tuple[float, float, int]:
    url = base + path
    per_client = max(1, requests_total // clients)
    samples: list[float] = []
    lock = threading.Lock()

    def client() -> None:
        session = requests.Session()
        session.get(url, timeout=60)  # warm the connection
        mine: list[float] = []
        started = time.monotonic()
        for _ in range(per_client):
            t0 = time.perf_counter()
            r = session.get(url, timeout=60)
            mine.append((time.perf_counter() - t0) * 1000)
            if r.status_code != 200:
                raise SystemExit(f"{path}: {r.status_code} {r.text[:200]}")
            if budget_s is not None and len(mine) >= min_requests \
                    and time.monotonic() - started > budget_s:
                break
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return percentile(samples, 0.5), percentile(samples, 0.99), len(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--threads", type=int, default=16, help="gunicorn gthread threads")
    parser.add_argument("--db", help="reuse/keep this database file (built if missing)")
    args = parser.parse_args(argv)

    tmp = None
    if args.db:
        db = args.db
    else:
        tmp = tempfile.mkdtemp(prefix="hg-bench-api-")
        db = f"{tmp}/bench.db"
    try:
        build_s = None
        if not Path(db).exists():
            build_s = round(build_database(db, args.jobs), 1)
        results: dict[str, list[float]] = {"enqueue_rps": []}
        endpoints = (("list_jobs", "/api/v1/jobs?limit=50"), ("counts", "/api/v1/jobs/counts"),
                     ("queues", "/api/v1/queues"))
        for name, _ in endpoints:
            for suffix in ("p50_ms", "p99_ms", f"c{args.clients}_p50_ms",
                           f"c{args.clients}_p99_ms"):
                results[f"{name}_{suffix}"] = []
        for _ in range(args.runs):
            proc, base = start_server(db, args.threads)
            try:
                for name, path in endpoints:
                    p50, p99 = latencies(base, path, 1, args.requests)
                    results[f"{name}_p50_ms"].append(p50)
                    results[f"{name}_p99_ms"].append(p99)
                    p50, p99 = latencies(base, path, args.clients, args.requests)
                    results[f"{name}_c{args.clients}_p50_ms"].append(p50)
                    results[f"{name}_c{args.clients}_p99_ms"].append(p99)
                results["enqueue_rps"].append(enqueue_rps(base, args.clients, args.seconds))
            finally:
                stop_server(proc)
        summary = {"jobs_in_db": args.jobs, "runs": args.runs, "clients": args.clients,
                   "build_s": build_s}
        for name, values in results.items():
            median = statistics.median(values)
            line = {"metric": name, "median": round(median, 2),
                    "min": round(min(values), 2), "max": round(max(values), 2)}
            print(json.dumps(line), flush=True)
            summary[name] = round(median, 2)
        print(json.dumps({"summary": summary}), flush=True)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
