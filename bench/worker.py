"""Worker benchmarks: drain throughput and pickup latency of ONE worker
process started with `headgate worker`, measured from outside like an operator would.

    .venv/bin/python bench/worker.py [--store sqlite|pg] [--runs 3] [--n 20000]

Prints one JSON line per figure: median, min and max over `--runs`, plus every run.

- drain: `--n` no-op jobs are enqueued first (not timed); then a worker process is
  launched with concurrency 2 and 8; the clock runs from the launch until the last job's
  side effect (a fixed-width O_APPEND record per job) is on disk. Includes start-up
  (reported separately as startup_s). Ids are checked for lost and duplicate runs.
- pickup latency: an idle worker (warm-up job done, then 1 s idle) gets `--lat-jobs`
  jobs enqueued one at a time `--lat-gap-ms` apart by this (separate) process; the
  handler records time.time() at start; latency = start - time taken just before the
  enqueue call. p50/p99 with linear interpolation.

The methodology matches the peer harness in ../shared/peers so figures compare.
The same module is the worker app (`--app bench.worker:make_worker`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REC = 29  # a job id (28 chars) and a newline

# -- the worker app (runs inside the worker process) ------------------------------------

_fds: dict[str, int] = {}


def _fd(var: str) -> int:
    path = os.environ[var]
    if path not in _fds:
        _fds[path] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    return _fds[path]


def noop(job: Any, ctx: Any) -> None:
    os.write(_fd("BENCH_DRAIN_FILE"), job.id.encode() + b"\n")


def stamp(job: Any, ctx: Any) -> None:
    started = time.time()
    os.write(_fd("BENCH_LAT_FILE"), b"%s %s %.6f\n" % (job.id.encode(), job.payload, started))


def make_worker(store: Any) -> Any:
    from headgate import Worker

    worker = Worker(store, queues=["bench"], concurrency=2)
    worker.register("noop", noop)
    worker.register("stamp", stamp)
    return worker


# -- the harness -------------------------------------------------------------------------

def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float | None:
    v = sorted(values)
    if not v:
        return None
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def agg(values: list[float | None]) -> dict[str, Any]:
    vals = [x for x in values if x is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "runs": values}
    return {"median": round(statistics.median(vals), 2), "min": round(min(vals), 2),
            "max": round(max(vals), 2), "runs": [None if x is None else round(x, 2)
                                                  for x in values]}


class Backend:
    """A fresh, empty database per run."""

    def __init__(self, kind: str, tmp: Path, pg_url: str | None) -> None:
        self.kind = kind
        self.tmp = tmp
        self.pg_url = pg_url
        self.run = 0
        self.url = ""
        self._db: str | None = None

    def fresh(self) -> str:
        self.drop()
        self.run += 1
        if self.kind == "sqlite":
            self.url = f"sqlite:///{self.tmp}/bench{self.run}.db"
        else:
            import uuid
            from urllib.parse import urlsplit, urlunsplit

            import psycopg

            assert self.pg_url
            self._db = f"hgbench_{uuid.uuid4().hex[:10]}"
            with psycopg.connect(self.pg_url, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self._db}"')
            parts = urlsplit(self.pg_url)
            self.url = urlunsplit((parts.scheme, parts.netloc, "/" + self._db, "", ""))
        import headgate

        headgate.open_store(self.url).close()  # migrate before anyone times anything
        return self.url

    def drop(self) -> None:
        if self.kind == "pg" and self._db:
            import psycopg

            with psycopg.connect(self.pg_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self._db}" WITH (FORCE)')
            self._db = None


class WorkerProc:
    def __init__(self, url: str, concurrency: int, env: dict[str, str], logpath: Path) -> None:
        self.logf = logpath.open("ab")
        argv = [sys.executable, "-m", "headgate.cli", "worker", "--app",
                "bench.worker:make_worker", "--store", url, "--concurrency", str(concurrency),
                "--log-level", "WARNING"]
        self.t_launch = time.monotonic()
        self.p = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=self.logf,
                                  stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self) -> int | None:
        code = None
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                code = self.p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(5)
        self.logf.close()
        return code


def worker_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["BENCH_DRAIN_FILE"] = str(tmp / "drain.txt")
    env["BENCH_LAT_FILE"] = str(tmp / "lat.txt")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def drain(backend: Backend, args: argparse.Namespace, concurrency: int, tmp: Path
          ) -> dict[str, Any]:
    import headgate

    url = backend.fresh()
    store = headgate.open_store(url)
    client = headgate.Client(store)
    for start in range(0, args.n, 1000):
        client.enqueue_many([headgate.Envelope(kind="noop", queue="bench")
                             for _ in range(min(1000, args.n - start))])
    store.close()
    env = worker_env(tmp)
    path = Path(env["BENCH_DRAIN_FILE"])
    path.unlink(missing_ok=True)
    worker = WorkerProc(url, concurrency, env, tmp / "worker.log")
    target = args.n * REC
    t_first = t_done = None
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and worker.alive():
        size = path.stat().st_size if path.exists() else 0
        now = time.monotonic()
        if size and t_first is None:
            t_first = now
        if size >= target:
            t_done = now
            break
        time.sleep(0.002)
    time.sleep(args.grace)
    code = worker.stop()
    ids = path.read_bytes().split() if path.exists() else []
    result: dict[str, Any] = {"executed": len(ids), "duplicates": len(ids) - len(set(ids)),
                              "lost": args.n - len(set(ids)), "exit_code": code,
                              "timed_out": t_done is None}
    if t_done is not None and t_first is not None:
        result["jobs_per_s"] = args.n / (t_done - worker.t_launch)
        result["jobs_per_s_after_first"] = (args.n - 1) / max(t_done - t_first, 1e-9)
        result["startup_s"] = t_first - worker.t_launch
    return result


def latency(backend: Backend, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import headgate

    url = backend.fresh()
    env = worker_env(tmp)
    path = Path(env["BENCH_LAT_FILE"])
    path.unlink(missing_ok=True)
    worker = WorkerProc(url, args.lat_concurrency, env, tmp / "worker.log")
    store = headgate.open_store(url)
    client = headgate.Client(store)

    def lines() -> int:
        return path.read_bytes().count(b"\n") if path.exists() else 0

    def wait_lines(n: int, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end and worker.alive():
            if lines() >= n:
                return True
            time.sleep(0.005)
        return False

    cpu_idle = None
    enqueue_errors: list[str] = []
    try:
        client.enqueue("stamp", b"%.6f" % time.time(), queue="bench")
        if not wait_lines(1, 60):
            raise RuntimeError(f"worker did not run the warm-up job; see {tmp}/worker.log")
        cpu0 = cpu_seconds(worker.p.pid)
        time.sleep(args.idle)
        cpu1 = cpu_seconds(worker.p.pid)
        if cpu0 is not None and cpu1 is not None:
            cpu_idle = (cpu1 - cpu0) / args.idle * 100
        gap = args.lat_gap_ms / 1000
        t0 = time.monotonic()
        for i in range(args.lat_jobs):
            pause = t0 + i * gap - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            t_enq = time.time()
            for _ in range(5):  # a producer retries a store hiccup (e.g. a deadlock victim)
                try:
                    client.enqueue("stamp", b"%.6f" % t_enq, queue="bench")
                    break
                except headgate.StoreUnavailable as exc:
                    enqueue_errors.append(str(exc))
        complete = wait_lines(args.lat_jobs + 1, 60)
    finally:
        store.close()
        code = worker.stop()
    lats = []
    for line in path.read_bytes().splitlines()[1:]:
        _, t_enq, t_start = line.split()
        lats.append((float(t_start) - float(t_enq)) * 1000)
    return {"p50_ms": pct(lats, 50), "p99_ms": pct(lats, 99),
            "max_ms": max(lats) if lats else None, "received": len(lats),
            "complete": complete, "exit_code": code, "idle_cpu_percent": cpu_idle,
            "enqueue_retries": len(enqueue_errors), "enqueue_errors": enqueue_errors[:3]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=["sqlite", "pg"], default="sqlite")
    ap.add_argument("--pg-url", default=os.environ.get("HG_TEST_PG") or os.environ.get("HG_PG"),
                    help="server URL for --store pg (a database is created per run)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--concurrency", default="2,8")
    ap.add_argument("--lat-jobs", type=int, default=200)
    ap.add_argument("--lat-gap-ms", type=float, default=20.0)
    ap.add_argument("--lat-concurrency", type=int, default=2)
    ap.add_argument("--idle", type=float, default=1.0)
    ap.add_argument("--grace", type=float, default=0.5,
                    help="seconds after the drain to catch duplicate runs")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--workloads", default="drain,latency")
    ap.add_argument("--keep-tmp", action="store_true", help="keep databases and logs")
    args = ap.parse_args()
    if args.store == "pg" and not args.pg_url:
        ap.error("--store pg needs --pg-url (or HG_TEST_PG / HG_PG)")
    tmp = Path(tempfile.mkdtemp(prefix="hg-bench-worker-"))
    backend = Backend(args.store, tmp, args.pg_url)
    info = {"python": platform.python_version(), "cpus": os.cpu_count(), "store": args.store}
    log(f"bench/worker.py: tmp {tmp}")
    wanted = [w.strip() for w in args.workloads.split(",")]
    try:
        if "drain" in wanted:
            for concurrency in [int(c) for c in args.concurrency.split(",")]:
                runs = []
                for r in range(args.runs):
                    res = drain(backend, args, concurrency, tmp)
                    log(f"drain c={concurrency} run {r + 1}: {res}")
                    runs.append(res)
                print(json.dumps({
                    "bench": "worker_drain", "what": "jobs/s, launch to last job",
                    "n": args.n, "concurrency": concurrency,
                    **agg([x.get("jobs_per_s") for x in runs]),
                    "after_first_job": agg([x.get("jobs_per_s_after_first") for x in runs]),
                    "startup_s": agg([x.get("startup_s") for x in runs]),
                    "lost": sum(x["lost"] for x in runs),
                    "duplicates": sum(x["duplicates"] for x in runs), **info,
                }), flush=True)
        if "latency" in wanted:
            runs = []
            for r in range(args.runs):
                res = latency(backend, args, tmp)
                log(f"latency run {r + 1}: {res}")
                runs.append(res)
            print(json.dumps({
                "bench": "worker_pickup_latency", "what": "ms, enqueue call to handler start",
                "jobs": args.lat_jobs, "gap_ms": args.lat_gap_ms,
                "concurrency": args.lat_concurrency,
                "p50_ms": agg([x["p50_ms"] for x in runs]),
                "p99_ms": agg([x["p99_ms"] for x in runs]),
                "max_ms": agg([x["max_ms"] for x in runs]),
                "idle_cpu_percent": agg([x["idle_cpu_percent"] for x in runs]),
                "received": [x["received"] for x in runs],
                "enqueue_retries": sum(x["enqueue_retries"] for x in runs), **info,
            }), flush=True)
    finally:
        backend.drop()
        if args.keep_tmp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
