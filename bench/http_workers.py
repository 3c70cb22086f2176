"""Claims per second over the worker protocol, beside the in-process worker's figure.

    .venv/bin/python bench/http_workers.py [--store sqlite|pg|both] [--n 20000]
        [--workers 8] [--capacity 4] [--pg postgresql://…] [--out result.json]

Per engine, on a fresh database each time:

- http: `--n` no-op jobs are enqueued first (not timed); a `headgate serve` process is
  started on the store; `--workers` HTTP workers (threads of this process, one
  connection each) register with `--capacity`, then claim as many as they have free
  (`wait_ms` 1000) and complete each job at once. The clock runs from the first claim
  until every job is completed; claims_per_s is jobs over that time, so it includes
  the completes (two requests a job, plus the claims).
- in_process: the same jobs on a new database, drained by one Python `Worker` in this
  process with concurrency `--workers` × `--capacity` and a no-op handler: the figure
  the protocol's overhead is measured against.

Prints one JSON object per engine and, with `--out`, writes them all as a JSON list.
PostgreSQL needs `--pg` (or HG_BENCH_PG / HG_TEST_PG): a server where a scratch
database may be created and dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

import headgate  # noqa: E402

KIND = "bench.noop"
QUEUE = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def scratch_db(engine: str, pg: str | None, tmp: Path) -> Iterator[str]:
    if engine == "sqlite":
        yield f"sqlite:///{tmp}/bench-{uuid.uuid4().hex[:8]}.db"
        return
    import psycopg

    assert pg is not None
    name = f"hg_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(pg)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))
    finally:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fill(url: str, n: int) -> None:
    store = headgate.open_store(url)
    try:
        client = headgate.Client(store)
        for i in range(0, n, 1000):
            client.enqueue_many([headgate.Envelope(kind=KIND, queue=QUEUE)
                                 for _ in range(min(1000, n - i))])
    finally:
        store.close()


@contextmanager
def serve(url: str, threads: int, tmp: Path) -> Iterator[str]:
    port = free_port()
    log = (tmp / f"serve-{port}.log").open("wb")
    exe = Path(sys.executable).with_name("headgate")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "headgate.cli"]
    proc = subprocess.Popen([*cmd, "serve", "--addr", f"127.0.0.1:{port}", "--store", url,
                             "--threads", str(threads)], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"serve exited {proc.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"serve did not start; see {log.name}") from None
                time.sleep(0.1)
        yield base + "/api/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


class HttpWorker(threading.Thread):
    def __init__(self, api: str, capacity: int, total: int, done: list[int],
                 lock: threading.Lock, started: threading.Event) -> None:
        super().__init__(daemon=True)
        self.api, self.capacity, self.total = api, capacity, total
        self.done, self.lock, self.started = done, lock, started
        self.session = requests.Session()
        self.requests = 0
        self.errors = 0

    def post(self, path: str, body: dict[str, Any]) -> requests.Response:
        self.requests += 1
        return self.session.post(self.api + path, json=body, timeout=60,
                                 headers={"Idempotency-Key": uuid.uuid4().hex})

    def run(self) -> None:
        r = self.post("/workers", {"queues": [QUEUE], "capacity": self.capacity,
                                   "agent": "python-requests bench/http_workers.py"})
        worker = r.json()["worker_id"]
        self.started.wait()
        while True:
            with self.lock:
                if self.done[0] >= self.total:
                    break
            r = self.post(f"/workers/{worker}/claim", {"wait_ms": 1000})
            if r.status_code != 200:
                self.errors += 1
                continue
            for job in r.json()["jobs"]:
                ack = self.post(f"/workers/{worker}/jobs/{job['id']}/complete",
                                {"lease_id": job["lease_id"], "fence": job["fence"]})
                if ack.status_code == 204:
                    with self.lock:
                        self.done[0] += 1
                else:
                    self.errors += 1
        self.requests += 1
        self.session.delete(f"{self.api}/workers/{worker}", timeout=60,
                            headers={"Idempotency-Key": uuid.uuid4().hex})


def http_run(url: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    fill(url, args.n)
    with serve(url, args.workers * 2 + 8, tmp) as api:
        done, lock, started = [0], threading.Lock(), threading.Event()
        workers = [HttpWorker(api, args.capacity, args.n, done, lock, started)
                   for _ in range(args.workers)]
        for w in workers:
            w.start()
        t0 = time.perf_counter()
        started.set()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - t0
    return {"jobs": done[0], "elapsed_s": round(elapsed, 3),
            "claims_per_s": round(done[0] / elapsed, 1),
            "requests": sum(w.requests for w in workers),
            "errors": sum(w.errors for w in workers)}


def in_process_run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    fill(url, args.n)
    store = headgate.open_store(url)
    try:
        worker = headgate.Worker(store, queues=[QUEUE],
                                 concurrency=args.workers * args.capacity)
        worker.handler(KIND)(lambda job, ctx: None)
        worker.configure(duties=False)
        t0 = time.perf_counter()
        worker.start()
        while store.counts(QUEUE).get("completed", 0) < args.n:
            time.sleep(0.01)
        elapsed = time.perf_counter() - t0
        worker.stop(2_000)
    finally:
        store.close()
    return {"jobs": args.n, "elapsed_s": round(elapsed, 3),
            "claims_per_s": round(args.n / elapsed, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=["sqlite", "pg", "both"], default="both")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--capacity", type=int, default=4)
    ap.add_argument("--pg", default=os.environ.get("HG_BENCH_PG")
                    or os.environ.get("HG_TEST_PG"))
    ap.add_argument("--out")
    args = ap.parse_args()
    engines = ["sqlite", "pg"] if args.store == "both" else [args.store]
    if "pg" in engines and not args.pg:
        if args.store == "pg":
            ap.error("PostgreSQL needs --pg (or HG_BENCH_PG)")
        engines.remove("pg")
    results = []
    with tempfile.TemporaryDirectory(prefix="hg-http-workers-") as tmp_name:
        tmp = Path(tmp_name)
        for engine in engines:
            with scratch_db(engine, args.pg, tmp) as url:
                http = http_run(url, args, tmp)
            with scratch_db(engine, args.pg, tmp) as url:
                local = in_process_run(url, args)
            result = {
                "bench": "http_workers", "engine": engine, "n": args.n,
                "workers": args.workers, "capacity": args.capacity,
                "http": http, "in_process": local,
                "http_vs_in_process": round(http["claims_per_s"] / local["claims_per_s"], 3),
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                            "platform": platform.platform()},
            }
            print(json.dumps(result), flush=True)
            results.append(result)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
