"""The long horizon: a fixed producer rate for an hour, a worker and a polled server.

    .venv/bin/python bench/long_horizon.py --store sqlite --out runs/lh-sqlite
    .venv/bin/python bench/long_horizon.py --store pg --pg-url postgresql://…/postgres \\
        --out runs/lh-pg
    .venv/bin/python bench/long_horizon.py --store pg --minutes 10 --out runs/lh-pg-10

What a queue leaks shows only after the store has turned over many times: a latency
that creeps up as a table or index bloats, a process that grows a little per job,
finished jobs that retention does not delete as fast as they finish, dead tuples that
autovacuum does not keep level. On a fresh database (a new SQLite file, or a database
created on the server of `--pg-url` and dropped afterwards):

- without `--rate`, clean drains measure the capacity first (the median of
  `--calib-runs` drains, each of `--calib-jobs` jobs enqueued, then drained by the same
  worker on a database of its own) and the producer runs at `--fraction` of it (half,
  by default);
- a producer thread here enqueues `--rate` jobs a second (`Client.enqueue_many` of the
  jobs due, every `--tick-ms`), each with `retention_ms` of `--retention-s`, so the
  retention duty deletes finished jobs within the run; each job's payload is the
  wall-clock time of its enqueue call;
- one `headgate worker --concurrency N` subprocess (duties on, as deployed) runs them:
  the handler appends the job's pickup latency (its start minus the enqueue time in
  the payload) to a file, so completions and latency are counted outside the store;
- one `headgate serve` subprocess (duties on too) is polled as a monitoring system
  would: `GET /api/v1/queues` and `GET /metrics` every `--poll-s` seconds.

Every `--bucket-s` seconds (a minute by default) it records a row: jobs produced and
completed, the backlog, pickup latency p50/p99/max, the RSS of the worker and of the
server (its master and children), the poll answers' status and time, the finished jobs
the server reports retained against those expected under the retention setting, and the
store's sizes: PostgreSQL's `pg_total_relation_size` / `pg_relation_size` of `jobs` (and
any `jobs_*` table) and of each of their indexes, `n_dead_tup`, `n_live_tup` and
autovacuum counts, the database size; SQLite's database and WAL file sizes, page and
freelist counts, and `dbstat`'s bytes of `jobs` and its indexes.

The summary compares, per series, the median of the first and the last quarter of the
buckets after a warm-up (the retention window and a minute, when sizes have levelled):
a series is flat when the last quarter's median is at most `FLAT_RATIO` times the
first's plus the series' floor (a noise allowance: a few ms of latency, a few MiB,
seconds of production for counts), and SQLite's WAL file, a high-water mark that the
store cuts back to its size limit, is also flat while it stays under that limit;
completions keep pace when the last quarter's median is within 10 % of production;
retention keeps up when, in every bucket after the warm-up, the finished jobs retained
are at most those finished within the retention window plus two retention ticks and a
poll. Fewer than four buckets after the warm-up give no verdict (null).

Files in `--out`: `long_horizon.json` (the rows and the summary),
`long_horizon.svg` (one small chart per series), `worker.log`, `serve.log`. It loads
the machine for the whole run: run it on a quiet one. `--minutes 0.5 --bucket-s 5
--rate 50 --retention-s 5` checks that it works.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

QUEUE = "bench"
FINISHED = ("completed", "archived", "cancelled", "undecodable")
FLAT_RATIO = 1.25
PACE_SHARE = 0.9
# Drawn in grey under a chart's own series.
OVERLAY = {"completed": "produced", "retained_finished": "retained_expected"}
RETENTION_TICK_S = 10.0  # the retention duty's interval (services.duties.DEFAULT_INTERVALS)

# -- the worker app (runs inside the worker process) ------------------------------------

_fd: int | None = None


def pickup(job: Any, ctx: Any) -> None:
    """Appends this run's pickup latency in ms: one write per line, O_APPEND."""
    started = time.time()
    global _fd
    if _fd is None:
        _fd = os.open(os.environ["BENCH_PICKUP_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                      0o644)
    try:
        enqueued = float(job.payload)
    except ValueError:
        enqueued = started
    os.write(_fd, b"%.2f\n" % ((started - enqueued) * 1000))


def make_worker(store: Any) -> Any:
    from headgate import Worker

    worker = Worker(store, queues=[QUEUE], concurrency=10)
    worker.register("pickup", pickup)
    return worker


# -- the harness -------------------------------------------------------------------------

def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float | None:
    """Linear interpolation, as bench/worker.py reports its pickup latency."""
    v = sorted(values)
    if not v:
        return None
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def child_env(tmp: Path) -> dict[str, str]:
    """The parent's environment without HG_* settings: the CLI gets --store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["BENCH_PICKUP_FILE"] = str(tmp / "pickup.txt")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True, check=False).stdout
    found = []
    for child in (int(p) for p in out.split()):
        found += [child, *descendants(child)]
    return found


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process and its descendants (a server is a gunicorn
    master and its worker child), in MiB; None once the process is gone."""
    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            if p == pid:
                return None
    return round(total / 1024, 1)


class Proc:
    """A headgate CLI subprocess in a session of its own, ended by its PID."""

    def __init__(self, argv: list[str], env: dict[str, str], logpath: Path) -> None:
        self.logf = logpath.open("ab")
        self.p = subprocess.Popen([sys.executable, "-m", "headgate.cli", *argv], env=env,
                                  cwd=ROOT, stdout=self.logf, stderr=subprocess.STDOUT,
                                  start_new_session=True)

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self) -> int | None:
        code = self.p.poll()
        if code is None:
            kids = descendants(self.p.pid)
            self.p.send_signal(signal.SIGTERM)
            try:
                code = self.p.wait(40)
            except subprocess.TimeoutExpired:
                for pid in [self.p.pid, *kids]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                self.p.wait(10)
        self.logf.close()
        return code


def worker_proc(url: str, concurrency: int, env: dict[str, str], logpath: Path) -> Proc:
    return Proc(["worker", "--app", "bench.long_horizon:make_worker", "--store", url,
                 "--concurrency", str(concurrency), "--log-level", "WARNING"], env, logpath)


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - localhost
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Tail:
    """Reads the pickup file's new lines: one latency (ms) per handler run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.rest = b""

    def read(self) -> list[float]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        data = self.rest + data
        cut = data.rfind(b"\n") + 1
        self.rest = data[cut:]
        return [float(x) for x in data[:cut].split()]


class Monitor(threading.Thread):
    """Polls the server as a monitoring system would; keeps the polls of the current
    bucket and the last answer's finished-job counts."""

    def __init__(self, base: str, every_s: float) -> None:
        super().__init__(name="monitor", daemon=True)
        self.base = base
        self.every_s = every_s
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.polls: list[tuple[str, int, float]] = []
        self.finished: int | None = None
        self.finished_at: float | None = None
        self.unfinished: int | None = None
        self.gauges: dict[str, float] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            for path in ("/api/v1/queues", "/metrics"):
                t = time.monotonic()
                try:
                    status, body = http_get(self.base + path)
                except OSError:
                    status, body = 0, b""
                ms = (time.monotonic() - t) * 1000
                with self.lock:
                    self.polls.append((path, status, ms))
                if status == 200:
                    self._read(path, body, t)
            self.stop.wait(max(0.0, self.every_s - (time.monotonic() - started)))

    def _read(self, path: str, body: bytes, at: float) -> None:
        if path == "/metrics":
            found = {m.group(1): float(m.group(2)) for m in re.finditer(
                r"^(headgate_store_[a-z_]+)(?:\{[^}]*\})? ([-+0-9.eE]+|NaN)$",
                body.decode(errors="replace"), re.MULTILINE)}
            with self.lock:
                self.gauges = {k: v for k, v in found.items() if not math.isnan(v)}
            return
        try:
            queues = json.loads(body)
        except ValueError:
            return
        for q in queues:
            if isinstance(q, dict) and q.get("queue") == QUEUE:
                by_state = q.get("by_state", {})
                with self.lock:
                    self.finished = sum(int(by_state.get(s, 0)) for s in FINISHED)
                    self.unfinished = q.get("unfinished_jobs")
                    self.finished_at = at

    def take(self) -> list[tuple[str, int, float]]:
        with self.lock:
            polls, self.polls = self.polls, []
        return polls


def sqlite_sizes(path: str) -> dict[str, Any]:
    """The SQLite side of `Sizes.read` (a whole walk of the file through `dbstat`)."""
    def size(p: str) -> int:
        try:
            return os.path.getsize(p)
        except OSError:
            return 0

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return _dbstat(conn, {
            "db_bytes": size(path), "wal_bytes": size(path + "-wal"),
            "page_count": conn.execute("PRAGMA page_count").fetchone()[0],
            "freelist_count": conn.execute("PRAGMA freelist_count").fetchone()[0]})
    finally:
        conn.close()


def _dbstat(conn: sqlite3.Connection, out: dict[str, Any]) -> dict[str, Any]:
    """Adds the bytes of `jobs` (and any `jobs_*` table) and of each of their indexes."""
    owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_schema"))
    try:
        pages = conn.execute(
            "SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.OperationalError:  # a build without dbstat: files and pages only
        return out
    tables: dict[str, Any] = {}
    for name, nbytes in pages:
        table = owner.get(name, name)
        if table != "jobs" and not table.startswith("jobs_"):
            continue
        entry = tables.setdefault(table, {"table_bytes": 0, "indexes": {}})
        if name == table:
            entry["table_bytes"] = nbytes
        else:
            entry["indexes"][name] = nbytes
    out["jobs_table_bytes"] = sum(t["table_bytes"] for t in tables.values())
    out["jobs_index_bytes"] = sum(sum(t["indexes"].values()) for t in tables.values())
    out["tables"] = tables
    return out


class Sizes:
    """The store's sizes: the tables and indexes the claim and retention work on."""

    def __init__(self, kind: str, url: str, path: str | None) -> None:
        self.kind = kind
        self.path = path
        self.conn: Any
        if kind == "pg":
            import psycopg

            self.conn = psycopg.connect(url, autocommit=True)
        else:
            assert path is not None
            self.conn = None

    def read(self) -> dict[str, Any]:
        return self._pg() if self.kind == "pg" else self._sqlite()

    def _pg(self) -> dict[str, Any]:
        tables: dict[str, Any] = {}
        for rel, total, heap, idx, dead, live, autovac, vac_at in self.conn.execute(
                "SELECT relname, pg_total_relation_size(relid), pg_relation_size(relid), "
                "pg_indexes_size(relid), n_dead_tup, n_live_tup, autovacuum_count, "
                "extract(epoch FROM now() - last_autovacuum)::float8 FROM pg_stat_user_tables "
                "WHERE relname = 'jobs' OR relname LIKE 'jobs\\_%' ORDER BY relname"):
            indexes = dict(self.conn.execute(
                "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes "
                "WHERE relname = %s ORDER BY indexrelname", (rel,)).fetchall())
            tables[rel] = {"total_bytes": total, "heap_bytes": heap, "index_bytes": idx,
                           "indexes": indexes, "dead_tuples": dead, "live_tuples": live,
                           "autovacuum_count": autovac,
                           "since_autovacuum_s": None if vac_at is None else round(vac_at, 1)}
        (all_dead,) = self.conn.execute(
            "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables").fetchone()
        (db_bytes,) = self.conn.execute(
            "SELECT pg_database_size(current_database())").fetchone()
        return {
            "jobs_total_bytes": sum(t["total_bytes"] for t in tables.values()),
            "jobs_heap_bytes": sum(t["heap_bytes"] for t in tables.values()),
            "jobs_index_bytes": sum(t["index_bytes"] for t in tables.values()),
            "jobs_dead_tuples": sum(t["dead_tuples"] for t in tables.values()),
            "jobs_live_tuples": sum(t["live_tuples"] for t in tables.values()),
            "all_dead_tuples": int(all_dead), "db_bytes": db_bytes, "tables": tables,
        }

    def _sqlite(self) -> dict[str, Any]:
        """In a child process at the lowest CPU priority: `dbstat` walks every page of the
        file (half a second or more at a few hundred MB), and on two cores that walk,
        beside the producer thread of this process, showed as pickup latency of its own
        every minute, growing with the file."""
        assert self.path is not None
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import long_horizon; "
                "print(json.dumps(long_horizon.sqlite_sizes(sys.argv[2])))")
        done = subprocess.run([sys.executable, "-c", code, str(HERE), self.path],
                              capture_output=True, text=True, check=True, timeout=600,
                              preexec_fn=lambda: os.nice(19))
        return json.loads(done.stdout)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def wait_lines(tail: Tail, n: int, worker: Proc, timeout: float) -> tuple[float, float] | None:
    """Waits until `n` handler runs were recorded; (first, last) run's read time."""
    seen = 0
    first = None
    end = time.monotonic() + timeout
    while time.monotonic() < end and worker.alive():
        got = len(tail.read())
        now = time.monotonic()
        if got and first is None:
            first = now
        seen += got
        if seen >= n:
            return (first or now), now
        time.sleep(0.005)
    return None


def calibrate(args: argparse.Namespace, backend: Any, tmp: Path, out: Path) -> dict[str, Any]:
    """The clean drain capacity: the median of `--calib-runs` drains, each of
    `--calib-jobs` jobs on a fresh database. One short drain moved by a third between
    sittings of the same code, and the rate of the whole hour is a fraction of it."""
    drains = [drain_once(args, backend, tmp, out, n) for n in range(1, args.calib_runs + 1)]
    rates = [d["jobs_per_s"] for d in drains]
    return {"jobs": args.calib_jobs, "runs": drains,
            "jobs_per_s": round(statistics.median(rates), 1),
            "min_jobs_per_s": min(rates), "max_jobs_per_s": max(rates)}


def drain_once(args: argparse.Namespace, backend: Any, tmp: Path, out: Path,
               n: int) -> dict[str, Any]:
    """One clean drain: `--calib-jobs` jobs enqueued, then one worker started; jobs a
    second from its first run to its last."""
    import headgate

    url = backend.fresh()
    store = headgate.open_store(url, migrate=False)
    client = headgate.Client(store)
    try:
        for start in range(0, args.calib_jobs, 1000):
            client.enqueue_many([headgate.Envelope(kind="pickup", queue=QUEUE, payload=b"0")
                                 for _ in range(min(1000, args.calib_jobs - start))])
    finally:
        store.close()
    env = child_env(tmp)
    Path(env["BENCH_PICKUP_FILE"]).unlink(missing_ok=True)
    tail = Tail(Path(env["BENCH_PICKUP_FILE"]))
    worker_log = out / f"calibration-worker-{n}.log"
    worker = worker_proc(url, args.concurrency, env, worker_log)
    try:
        span = wait_lines(tail, args.calib_jobs, worker, 600)
    finally:
        worker.stop()
    if span is None:
        raise RuntimeError(f"calibration drain {n} did not finish; see {worker_log}")
    seconds = max(span[1] - span[0], 1e-3)
    return {"seconds": round(seconds, 3),
            "jobs_per_s": round((args.calib_jobs - 1) / seconds, 1)}


def finished_within(timeline: list[tuple[float, int]], now: float, window: float) -> int:
    """Handler runs recorded in (now - window, now], from the per-second timeline."""
    at_now = timeline[-1][1] if timeline else 0
    before = 0
    for t, n in timeline:
        if t > now - window:
            break
        before = n
    return at_now - before


def run(args: argparse.Namespace, tmp: Path, out: Path) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from worker import Backend  # bench/worker.py: a fresh database per run, dropped after

    backend = Backend(args.store, tmp, args.pg_url)
    calibration = None
    try:
        rate = args.rate
        if rate is None:
            calibration = calibrate(args, backend, tmp, out)
            rate = round(calibration["jobs_per_s"] * args.fraction, 1)
            log(f"clean drain {calibration['jobs_per_s']} jobs a second: producing {rate}")
        url = backend.fresh()
        path = url.removeprefix("sqlite:///") if args.store == "sqlite" else None
        result = horizon(args, url, path, rate, tmp, out)
    finally:
        backend.drop()
    result["calibration"] = calibration
    return result


def horizon(args: argparse.Namespace, url: str, path: str | None, rate: float, tmp: Path,
            out: Path) -> dict[str, Any]:
    from fixed_rate import Producer

    import headgate

    env = child_env(tmp)
    pickup_file = Path(env["BENCH_PICKUP_FILE"])
    pickup_file.unlink(missing_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve = Proc(["serve", "--addr", f"127.0.0.1:{port}", "--store", url, "--threads", "4",
                  "--log-level", "warning"], env, out / "serve.log")
    worker = worker_proc(url, args.concurrency, env, out / "worker.log")
    retention_ms = int(args.retention_s * 1000)
    producer = Producer(url, rate, args.tick_ms / 1000, lambda n: [  # payload: enqueue time
        headgate.Envelope(kind="pickup", queue=QUEUE, payload=b"%.6f" % time.time(),
                          retention_ms=retention_ms) for _ in range(n)])
    monitor = Monitor(base, args.poll_s)
    sizes = Sizes(args.store, url, path)
    rows: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            if not serve.alive():
                raise RuntimeError(f"serve exited; see {out}/serve.log")
            try:
                if http_get(base + "/healthz", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"serve did not answer /healthz; see {out}/serve.log")
            time.sleep(0.2)
        tail = Tail(pickup_file)
        store = headgate.open_store(url, migrate=False)
        try:  # one job through the worker before the clock starts: its start-up is not timed
            headgate.Client(store).enqueue("pickup", b"%.6f" % time.time(), queue=QUEUE,
                                           retention_ms=retention_ms)
        finally:
            store.close()
        monitor.start()
        if wait_lines(tail, 1, worker, 120) is None:
            raise RuntimeError(f"the worker ran no job; see {out}/worker.log")
        deadline = time.monotonic() + 60
        while monitor.finished_at is None:  # the monitor sees the queue before the load
            if time.monotonic() > deadline:
                raise RuntimeError(f"GET /api/v1/queues never listed {QUEUE!r}; see "
                                   f"{out}/serve.log")
            time.sleep(0.05)
        monitor.take()
        t0 = time.monotonic()
        producer.start()
        duration = args.minutes * 60
        buckets = max(1, math.ceil(duration / args.bucket_s - 1e-9))
        timeline: list[tuple[float, int]] = [(0.0, 0)]
        completed_total = last_produced = 0
        lats: list[float] = []
        for b in range(1, buckets + 1):
            end = min(b * args.bucket_s, duration)
            while True:  # a second's reads of the pickup file until the bucket's end
                now = time.monotonic() - t0
                if now >= end:
                    break
                time.sleep(min(1.0, end - now))
                got = tail.read()
                lats += got
                completed_total += len(got)
                timeline.append((time.monotonic() - t0, completed_total))
                if not worker.alive():
                    raise RuntimeError(f"the worker exited; see {out}/worker.log")
                if not serve.alive():
                    raise RuntimeError(f"serve exited; see {out}/serve.log")
            produced = producer.produced
            polls = monitor.take()
            with monitor.lock:
                finished, finished_at = monitor.finished, monitor.finished_at
                unfinished, gauges = monitor.unfinished, dict(monitor.gauges)
            row: dict[str, Any] = {
                "bucket": b, "t_s": round(end, 1), "minute": round(end / 60, 3),
                "produced": produced - last_produced, "completed": len(lats),
                "backlog": produced - completed_total,
                "pickup_p50_ms": pct(lats, 50), "pickup_p99_ms": pct(lats, 99),
                "pickup_max_ms": max(lats) if lats else None,
                "worker_rss_mb": rss_mb(worker.p.pid), "serve_rss_mb": rss_mb(serve.p.pid),
                "polls": len(polls), "poll_errors": sum(1 for _, s, _ in polls if s != 200),
                "poll_p50_ms": pct([ms for *_, ms in polls], 50),
                "poll_max_ms": max((ms for *_, ms in polls), default=None),
                "unfinished_reported": unfinished,
                "retained_finished": finished,
                "store_gauges": gauges,
            }
            if finished_at is not None:
                at = finished_at - t0
                row["retained_expected"] = finished_within(timeline, at, args.retention_s)
                row["retained_bound"] = finished_within(
                    timeline, at, args.retention_s + 2 * RETENTION_TICK_S + args.poll_s)
            t_size = time.monotonic()
            row.update(sizes.read())
            row["size_read_ms"] = round((time.monotonic() - t_size) * 1000, 1)
            for k in ("pickup_p50_ms", "pickup_p99_ms", "pickup_max_ms", "poll_p50_ms",
                      "poll_max_ms"):
                if row[k] is not None:
                    row[k] = round(row[k], 2)
            rows.append(row)
            last_produced = produced
            lats = []
            log(json.dumps({k: v for k, v in row.items()
                            if k not in ("tables", "store_gauges")}))
    finally:
        producer.stop.set()
        monitor.stop.set()
        producer.join(30)
        monitor.join(30)
        worker_code = worker.stop()
        serve_code = serve.stop()
        sizes.close()
    return {
        "bench": "long_horizon", "store": args.store, "rate": rate,
        "concurrency": args.concurrency, "minutes": args.minutes, "bucket_s": args.bucket_s,
        "retention_s": args.retention_s, "poll_s": args.poll_s,
        "produced": producer.produced, "completed": completed_total,
        "producer_errors": len(producer.errors), "producer_error_sample": producer.errors[:3],
        "worker_exit_code": worker_code, "serve_exit_code": serve_code,
        "summary": summarize(rows, args, rate), "rows": rows,
    }


# -- the verdicts --------------------------------------------------------------------------

def series_floors(rate: float, bucket_s: float) -> dict[str, tuple[str, float]]:
    """Each series' label and the noise it may grow by on top of FLAT_RATIO."""
    mib = 1024 * 1024
    return {
        "backlog": ("backlog (jobs)", rate * 2),
        "pickup_p50_ms": ("pickup p50 (ms)", 5.0),
        "pickup_p99_ms": ("pickup p99 (ms)", 25.0),
        "worker_rss_mb": ("worker RSS (MiB)", 8.0),
        "serve_rss_mb": ("serve RSS (MiB)", 8.0),
        "poll_p50_ms": ("poll p50 (ms)", 20.0),
        "retained_finished": ("finished jobs retained", rate * 30),
        "jobs_total_bytes": ("jobs total size (bytes)", 4 * mib),
        "jobs_heap_bytes": ("jobs heap (bytes)", 4 * mib),
        "jobs_index_bytes": ("jobs indexes (bytes)", 4 * mib),
        "jobs_dead_tuples": ("jobs n_dead_tup", rate * 30),
        "jobs_live_tuples": ("jobs n_live_tup", rate * 30),
        "db_bytes": ("database size (bytes)", 4 * mib),
        "wal_bytes": ("WAL file (bytes)", 4 * mib),
        "jobs_table_bytes": ("jobs table pages (bytes)", 4 * mib),
    }


def series_caps() -> dict[str, float]:
    """Series judged by a cap as well: the WAL file's size is the high-water mark of the
    WAL since a writer last cut it back, and headgate's SQLite store cuts it back to its
    limit (`journal_size_limit`). So it need not stay level, only under that limit plus
    the floor."""
    from headgate.adapters.sqlite.checkpoint import WAL_SIZE_LIMIT

    return {"wal_bytes": WAL_SIZE_LIMIT + series_floors(0, 1)["wal_bytes"][1]}


def median_of(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(rows: list[dict[str, Any]], args: argparse.Namespace, rate: float
              ) -> dict[str, Any]:
    warmup = args.retention_s + 60 if args.warmup_s is None else args.warmup_s
    steady = [r for r in rows if r["t_s"] - args.bucket_s >= warmup - 1e-9]
    quarter = len(steady) // 4
    enough = quarter >= 1
    first, last = (steady[:quarter], steady[-quarter:]) if enough else ([], [])
    series: dict[str, Any] = {}
    for key, (label, floor) in series_floors(rate, args.bucket_s).items():
        if not any(r.get(key) is not None for r in rows):
            continue
        a, z = median_of(first, key), median_of(last, key)
        flat = None if a is None or z is None else bool(z <= FLAT_RATIO * a + floor)
        series[key] = {"label": label, "floor": floor, "first_quarter_median": a,
                       "last_quarter_median": z,
                       "ratio": None if not a or z is None else round(z / a, 3),
                       "flat": flat}
        cap = series_caps().get(key)
        values = [r[key] for r in steady if r.get(key) is not None]
        if cap is not None and values and flat is not None:
            series[key].update(cap=cap, steady_max=max(values),
                               flat=flat or max(values) <= cap)
    produced, completed = median_of(last, "produced"), median_of(last, "completed")
    pace = None if produced is None or completed is None else bool(
        completed >= PACE_SHARE * produced)
    checked = [r for r in steady if r.get("retained_finished") is not None
               and r.get("retained_bound") is not None]
    kept = [r for r in checked if r["retained_finished"] <= r["retained_bound"]]
    retention = {
        "checked_buckets": len(checked), "kept_up_buckets": len(kept),
        "keeps_up": bool(len(kept) == len(checked)) if enough and checked else None,
        "worst_excess": max((r["retained_finished"] - r["retained_bound"] for r in checked),
                            default=None),
    }
    verdicts = [s["flat"] for s in series.values()] + [pace, retention["keeps_up"]]
    return {
        "rule": (f"the buckets after a warm-up of {warmup:g} s are split in quarters; "
                 "a series is flat when the median of the last quarter is at most "
                 f"{FLAT_RATIO} x the first quarter's median plus "
                 "the series' floor (the WAL file: or every bucket at most its size "
                 "limit plus that floor); completions keep pace when the last quarter's median "
                 f"is at least {PACE_SHARE} x production's; retention keeps up when every "
                 "bucket after the warm-up reports at most the jobs finished within the "
                 f"retention window plus {2 * RETENTION_TICK_S:g} s (two retention ticks) "
                 "and a poll interval; fewer than 4 buckets after the warm-up: null"),
        "warmup_s": warmup, "steady_buckets": len(steady), "quarter_buckets": quarter,
        "series": series,
        "completions": {"last_quarter_produced_median": produced,
                        "last_quarter_completed_median": completed, "keeps_pace": pace},
        "retention": retention,
        "all_flat": None if any(v is None for v in verdicts) else all(verdicts),
    }


# -- the plot ----------------------------------------------------------------------------

def fmt(v: float, binary: bool) -> str:
    steps = (((1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki")) if binary
             else ((1e9, "G"), (1e6, "M"), (1e3, "k")))
    for div, unit in steps:
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}"


def svg(result: dict[str, Any]) -> str:
    """One small line chart per series, the steady part after the dashed line; each
    title says the verdict. Written by hand: no plotting dependency."""
    rows = result["rows"]
    summary = result["summary"]
    pace = summary["completions"]["keeps_pace"]
    charts: list[tuple[str, str, str | None]] = [(
        "completed", "completed (grey: produced)",
        None if pace is None else ("keeps pace" if pace else "falls behind"))]
    for k, s in summary["series"].items():
        said = {True: "flat", False: "not flat"}.get(s["flat"], "no verdict")
        if s["ratio"] is not None:
            said += f" (x{s['ratio']:g})"
        charts.append((k, s["label"] + (" (grey: expected)" if k in OVERLAY else ""), said))
    w, h, pad_l, pad_b, pad_t, cols = 300, 150, 52, 22, 30, 3
    n = len(charts)
    height = math.ceil(n / cols) * (h + 10) + 40
    width = cols * (w + 10)
    head = (f"{result['store']} · {result['rate']:g} jobs a second · "
            f"{result['minutes']:g} min · retention {result['retention_s']:g} s · "
            f"all flat: {summary['all_flat']}")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="8" y="20" font-size="13">{html.escape(head)}</text>']
    tmax = max((r["t_s"] for r in rows), default=1) or 1
    warm = summary["warmup_s"]
    for i, (key, label, verdict) in enumerate(charts):
        ox, oy = (i % cols) * (w + 10) + 5, (i // cols) * (h + 10) + 35
        pts = [(r["t_s"], float(r[key])) for r in rows if r.get(key) is not None]
        grey = [(r["t_s"], float(r[OVERLAY[key]])) for r in rows
                if key in OVERLAY and r.get(OVERLAY[key]) is not None]
        lo = min((v for _, v in pts + grey), default=0.0)
        hi = max((v for _, v in pts + grey), default=1.0)
        lo = min(lo, 0.0)
        if hi <= lo:
            hi = lo + 1
        pw, ph = w - pad_l - 8, h - pad_b - pad_t

        def x(t: float) -> float:
            return ox + pad_l + pw * t / tmax  # noqa: B023 - used inside this iteration

        def y(v: float) -> float:
            return oy + pad_t + ph * (1 - (v - lo) / (hi - lo))  # noqa: B023

        colour = ("#1a7f37" if verdict and verdict.startswith(("flat", "keeps"))
                  else "#cf222e" if verdict and verdict.startswith(("not", "falls"))
                  else "#57606a")
        title = label + (f" — {verdict}" if verdict else "")
        parts += [f'<rect x="{ox}" y="{oy}" width="{w}" height="{h}" fill="none" '
                  'stroke="#d0d7de"/>',
                  f'<text x="{ox + 6}" y="{oy + 16}" fill="{colour}">{html.escape(title)}</text>',
                  f'<text x="{ox + pad_l - 4}" y="{y(hi) + 4:.1f}" text-anchor="end">'
                  f'{fmt(hi, "bytes" in label)}</text>',
                  f'<text x="{ox + pad_l - 4}" y="{y(lo) + 4:.1f}" text-anchor="end">'
                  f'{fmt(lo, "bytes" in label)}</text>',
                  f'<text x="{ox + pad_l}" y="{oy + h - 6}">0</text>',
                  f'<text x="{ox + w - 8}" y="{oy + h - 6}" text-anchor="end">'
                  f'{tmax / 60:.3g} min</text>',
                  f'<line x1="{ox + pad_l}" y1="{y(lo):.1f}" x2="{ox + pad_l + pw}" '
                  f'y2="{y(lo):.1f}" stroke="#8c959f"/>']
        if 0 < warm < tmax:
            parts.append(f'<line x1="{x(warm):.1f}" y1="{oy + pad_t}" x2="{x(warm):.1f}" '
                         f'y2="{oy + pad_t + ph}" stroke="#8c959f" stroke-dasharray="3,3"/>')
        if grey:
            line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in grey)
            parts.append(f'<polyline points="{line}" fill="none" stroke="#8c959f" '
                         'stroke-width="1" stroke-dasharray="4,2"/>')
        if pts:
            line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            parts.append(f'<polyline points="{line}" fill="none" stroke="#0969da" '
                         'stroke-width="1.5"/>')
            if len(pts) == 1:
                parts.append(f'<circle cx="{x(pts[0][0]):.1f}" cy="{y(pts[0][1]):.1f}" r="2" '
                             'fill="#0969da"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=["sqlite", "pg"], default="sqlite")
    ap.add_argument("--pg-url", default=os.environ.get("HG_TEST_PG") or os.environ.get("HG_PG"),
                    help="server URL for --store pg (a database is created for the run)")
    ap.add_argument("--out", required=True, help="directory for the JSON, the SVG and logs")
    ap.add_argument("--minutes", type=float, default=60.0, help="length of the steady load")
    ap.add_argument("--bucket-s", type=float, default=60.0, help="seconds per recorded row")
    ap.add_argument("--rate", type=float, help="jobs enqueued per second (default: "
                    "--fraction of the clean drain capacity, measured first)")
    ap.add_argument("--fraction", type=float, default=0.5,
                    help="share of the clean drain capacity to produce without --rate")
    ap.add_argument("--calib-jobs", type=int, default=20_000,
                    help="jobs of each clean drain that measures the capacity")
    ap.add_argument("--calib-runs", type=int, default=3,
                    help="clean drains; the capacity is their median")
    ap.add_argument("--retention-s", type=float, default=180.0,
                    help="each job's retention after it finished")
    ap.add_argument("--warmup-s", type=float,
                    help="seconds left out of the verdicts (default: retention + 60)")
    ap.add_argument("--poll-s", type=float, default=5.0,
                    help="seconds between the monitor's polls of the server")
    ap.add_argument("--tick-ms", type=float, default=20.0, help="the producer's tick")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--keep-tmp", action="store_true", help="keep the database and files")
    args = ap.parse_args()
    if args.store == "pg" and not args.pg_url:
        ap.error("--store pg needs --pg-url (or HG_TEST_PG / HG_PG)")
    if args.minutes <= 0 or args.bucket_s <= 0 or args.poll_s <= 0 or args.tick_ms <= 0:
        ap.error("--minutes, --bucket-s, --poll-s and --tick-ms must be positive")
    if args.rate is not None and args.rate <= 0:
        ap.error("--rate must be positive")
    if not 0 < args.fraction <= 1:
        ap.error("--fraction must be in (0, 1]")
    if (args.calib_jobs < 2 or args.calib_runs < 1 or args.retention_s < 0
            or args.concurrency < 1):
        ap.error("--calib-jobs must be >= 2, --calib-runs >= 1, --retention-s >= 0, "
                 "--concurrency >= 1")
    # A SIGTERM unwinds like an interrupt, so the worker and server are stopped too
    # (each runs in a session of its own and would outlive this process).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="hg-bench-horizon-"))
    log(f"bench/long_horizon.py: tmp {tmp}, out {out}")
    started = time.time()
    try:
        result = run(args, tmp, out)
    finally:
        if args.keep_tmp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    from held_phases import commit  # bench/held_phases.py

    result.update({"commit": commit(), "started_at": round(started, 1),
                   "wall_s": round(time.time() - started, 1),
                   "python": platform.python_version(), "cpus": os.cpu_count(),
                   "platform": platform.platform()})
    ordered = {k: result[k] for k in result if k != "rows"} | {"rows": result["rows"]}
    (out / "long_horizon.json").write_text(json.dumps(ordered, indent=1) + "\n")
    (out / "long_horizon.svg").write_text(svg(result))
    log(f"wrote {out / 'long_horizon.json'} and {out / 'long_horizon.svg'}; "
        f"all flat: {result['summary']['all_flat']}")


if __name__ == "__main__":
    main()
