"""Inspection latency with a large database: the control API's read endpoints
and every dashboard page, over real HTTP against `headgate serve`, on SQLite and on
PostgreSQL. Target: p99 < 50 ms with 1,000,000 jobs. Run it as `bench/inspect.py` (this
module is its implementation; see that file for why the two are apart).

    .venv/bin/python bench/inspect.py --store sqlite [--jobs 1000000] [--runs 3]
    .venv/bin/python bench/inspect.py --store pg [--pg-url postgresql://…/postgres]

The database (built once, then cached keyed by the job count and this builder's
version: a SQLite file under /tmp/hg-inspect-cache/, or a database `hg_inspect_<N>_v<V>`
on the PostgreSQL server; `--rebuild` forces a new one) holds:

- the dashboard demo's real seed (`headgate.dashboard.demo.seed`, through the store's
  own admit/ack paths): archived failures with error history and logs, completed jobs
  with results, running jobs with progress and output, a genuinely quarantined crash
  loop, throttled and paused rate classes, a concurrency ceiling, periodic schedules;
- N jobs through `Store.enqueue_many` (batches of 5,000) over 6 queues, 12 kinds,
  50 partitions, 3 priorities and tags (some `vip`), 10 % scheduled days ahead, 1 %
  pending; retention 7 days so nothing expires under the benchmark;
- then, in one bulk UPDATE per state (the schema's own triggers keep every maintained
  counter in step, exactly as for the store's writes), the terminal history a busy
  queue accumulates: ~54 % completed (attempted/finalized over the last 12 h, a worker
  id), 5 % archived (an error entry in `errors`), 2 % retryable; ~28 % stay available;
- 8 worker registry rows (heartbeats refreshed at every run, so /workers and /cluster
  show a fleet). PostgreSQL gets `VACUUM ANALYZE` after the build, as autovacuum would;
  SQLite gets nothing headgate itself does not do.

Each run starts `headgate serve` (duties on, as deployed) and, per endpoint, makes
`--requests` sequential keep-alive GETs (a slow endpoint stops after `--budget` seconds
with at least 20), reporting p50/p99 in ms. One JSON line per endpoint with the median,
min and max over `--runs` runs, then a summary line (with the 1-minute load average at
each run's start and end: p99 over a few hundred sequential GETs follows the machine's
load); `--markdown` also prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

import requests

from headgate.core.records import WorkerBeat

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from headgate import Envelope

# headgate (and bench/api.py, which imports it) is imported only after main() has chosen
# which headgate to measure: a snapshot of one commit (--ref, default HEAD) or the
# working tree as it is (--ref worktree).

BUILD_VERSION = 1  # bump when the data set changes, so caches are rebuilt
CACHE_DIR = Path(os.environ.get("HG_INSPECT_CACHE", "/tmp/hg-inspect-cache"))
CACHE_MAX_AGE_S = 6 * 86_400  # retention is 7 days: rebuild before anything expires
TARGET_P99_MS = 50.0
BATCH = 5_000
PARTITIONS = 50
DAY_MS = 86_400_000
RETENTION_MS = 7 * DAY_MS
# (queue, kinds, rate class, share of the jobs in %)
QUEUES: tuple[tuple[str, tuple[str, ...], str, int], ...] = (
    ("emails", ("send_email", "send_digest"), "smtp", 35),
    ("webhooks", ("deliver_webhook", "retry_webhook"), "webhooks", 25),
    ("reports", ("render_report", "export_csv"), "", 15),
    ("billing", ("charge_card", "refund_card"), "", 10),
    ("ingest", ("import_csv", "geocode"), "", 10),
    ("notifications", ("send_sms", "push"), "", 5),
)
ERROR_TEXT = ("ConnectionResetError: [Errno 104] Connection reset by peer\n"
              "  File \"app/tasks.py\", line 42, in deliver\n    resp = session.post(url)")


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


# -- the data set ------------------------------------------------------------------------

def _queue_of(i: int) -> tuple[str, tuple[str, ...], str]:
    slot = i % 100
    acc = 0
    for name, kinds, rate, share in QUEUES:
        acc += share
        if slot < acc:
            return name, kinds, rate
    return QUEUES[-1][0], QUEUES[-1][1], QUEUES[-1][2]


def envelopes(start: int, n: int, now_ms: int, rng: random.Random) -> list[Envelope]:
    from headgate import Envelope

    out = []
    for i in range(start, start + n):
        queue, kinds, rate = _queue_of(i)
        tenant = f"tenant-{(i * 7) % PARTITIONS:02d}"
        tags = ["bench", "vip" if i % 13 == 0 else "std"]
        scheduled = now_ms + rng.randint(30, 60) * DAY_MS if i % 10 == 9 else 0
        payload = b'{"tenant":"%s","n":%d,"to":"user%d@example.com","template":"receipt"}' % (
            tenant.encode(), i, i % 9973)
        out.append(Envelope(
            kind=kinds[(i // 100) % len(kinds)], payload=payload, queue=queue,
            partition_key=tenant, rate_class=rate, priority=(0, 0, 0, 5, 10)[i % 5],
            tags=tags, scheduled_at_ms=scheduled, pending=i % 100 == 42,
            retention_ms=RETENTION_MS,
        ).validated())
    return out


def _terminal_sql(dialect: str, now_ms: int) -> list[tuple[str, str]]:
    """(label, UPDATE) turning part of the bulk jobs into what workers would have left.
    Only rows that are still `available` and were enqueued by the builder are touched."""
    bucket = "(rowid % 100)"
    ago = f"((rowid * 7919) % {12 * 3_600_000})"  # spread over the last 12 hours
    err = json.dumps([{"attempt": 1, "at_ms": now_ms - 3_600_000, "error": ERROR_TEXT,
                       "logs": ["connecting", "connection reset, giving up"],
                       "worker": "worker-3", "outcome": "skip"}]).replace("'", "''")
    retry_err = err.replace('"skip"', '"retry"')
    base = "WHERE state = 'available' AND tags LIKE '%\"bench\"%' AND " + bucket
    worker = ("'worker-' || (rowid % 8)" if dialect == "sqlite"
              else "'worker-' || (rowid % 8)::text")
    return [
        ("completed", f"""UPDATE jobs SET state = 'completed', attempt = 1,
            worker_id = {worker}, attempted_at_ms = {now_ms} - {ago} - 40,
            finalized_at_ms = {now_ms} - {ago},
            expires_at_ms = {now_ms} - {ago} + retention_ms {base} < 60"""),
        ("archived", f"""UPDATE jobs SET state = 'archived', attempt = 1,
            worker_id = {worker}, attempted_at_ms = {now_ms} - {ago} - 900,
            finalized_at_ms = {now_ms} - {ago},
            expires_at_ms = {now_ms} - {ago} + retention_ms,
            errors = '{err}' {base} BETWEEN 60 AND 64"""),
        ("retryable", f"""UPDATE jobs SET state = 'retryable', attempt = 1,
            worker_id = {worker}, attempted_at_ms = {now_ms} - {ago},
            scheduled_at_ms = {now_ms} + {7 * DAY_MS} + {ago},
            errors = '{retry_err}' {base} BETWEEN 65 AND 67"""),
    ]


def heartbeat_fleet(store: Any) -> None:
    """Eight live workers in the registry (refreshed per run: the dashboard lists those
    with a heartbeat in the last 15 minutes)."""
    now = store.now_ms()
    for k in range(8):
        queues = [q[0] for q in QUEUES[k % 3::3]]
        store.heartbeat(WorkerBeat(f"worker-{k}", host=f"app-{k // 2}", pid=4000 + k,
                                   queues=tuple(queues), concurrency=10, inflight=k % 4,
                                   polls=100_000 + k, empty_polls=20_000 + k,
                                   started_at_ms=now - 3_600_000, status="running"))


def build(url: str, jobs: int, dialect: str, raw: Any) -> dict[str, Any]:
    """Fill the empty store at `url`; `raw()` opens a plain DB-API connection to it."""
    import headgate
    from headgate.dashboard import demo

    t0 = time.perf_counter()
    store = headgate.open_store(url)  # the schema, through the store's migrations
    try:
        demo.seed(store)
        store.upsert_rate_class("smtp", 50, 1000, 100)  # the emails backlog drains
        store.set_enqueue_limit("billing", None)  # the demo's 500 would refuse the bulk
        rng = random.Random(8)
        now = store.now_ms()
        done = 0
        t_enq = time.perf_counter()
        while done < jobs:
            n = min(BATCH, jobs - done)
            store.enqueue_many(envelopes(done, n, now, rng))
            done += n
            if done % 100_000 == 0 or done == jobs:
                rate = done / (time.perf_counter() - t_enq)
                log(json.dumps({"building": done, "jobs_per_s": round(rate)}))
        enqueue_s = time.perf_counter() - t_enq
        store.set_enqueue_limit("billing", 2 * jobs)
        heartbeat_fleet(store)
    finally:
        store.close()
    t_upd = time.perf_counter()
    conn = raw()
    try:
        for label, sql in _terminal_sql(dialect, now):
            cur = conn.execute(sql)
            conn.commit()
            log(json.dumps({"state": label, "rows": cur.rowcount}))
    finally:
        conn.close()
    update_s = time.perf_counter() - t_upd
    return {"enqueue_s": round(enqueue_s, 1), "update_s": round(update_s, 1),
            "build_s": round(time.perf_counter() - t0, 1)}


class SqliteTarget:
    dialect = "sqlite"

    def __init__(self, jobs: int, rebuild: bool) -> None:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        self.path = CACHE_DIR / f"sqlite-{jobs}-v{BUILD_VERSION}.db"
        self.jobs = jobs
        self.rebuild = rebuild

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def ensure(self) -> dict[str, Any] | None:
        fresh = self.path.exists() and time.time() - self.path.stat().st_mtime < CACHE_MAX_AGE_S
        if fresh and not self.rebuild:
            return None
        building = self.path.with_name(self.path.name + ".building")
        for p in (self.path, building):
            for suffix in ("", "-wal", "-shm"):
                Path(str(p) + suffix).unlink(missing_ok=True)
        info = build(f"sqlite:///{building}", self.jobs, "sqlite",
                     lambda: sqlite3.connect(building))
        # Checkpoint the WAL into the file, then move it into place: a cache file
        # exists only once it is complete.
        conn = sqlite3.connect(building)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        for suffix in ("-wal", "-shm"):
            Path(str(building) + suffix).unlink(missing_ok=True)
        building.rename(self.path)
        return info

    def describe(self) -> dict[str, Any]:
        return {"sqlite": sqlite3.sqlite_version, "db_file": str(self.path),
                "db_mb": round(self.path.stat().st_size / 1e6)}


class PgTarget:
    dialect = "pg"

    def __init__(self, jobs: int, rebuild: bool, admin_url: str) -> None:
        self.admin_url = admin_url
        self.name = f"hg_inspect_{jobs}_v{BUILD_VERSION}"
        self.jobs = jobs
        self.rebuild = rebuild

    def _url(self, db: str) -> str:
        parts = urlsplit(self.admin_url)
        return urlunsplit((parts.scheme, parts.netloc, "/" + db, parts.query, parts.fragment))

    @property
    def url(self) -> str:
        return self._url(self.name)

    def ensure(self) -> dict[str, Any] | None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                "WHERE datname = %s", (self.name,)).fetchone()
            built_at = float(row[0]) if row and row[0] and row[0].replace(".", "").isdigit() \
                else None
            if built_at and time.time() - built_at < CACHE_MAX_AGE_S and not self.rebuild:
                return None
            building = self.name + "_building"
            for db in (self.name, building):
                admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{building}"')
        url = self._url(building)

        def raw() -> Any:
            conn = psycopg.connect(url)
            conn.execute("SET synchronous_commit = on")
            return _PgCompat(conn)

        info = build(url, self.jobs, "pg", raw)
        t = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        info["vacuum_analyze_s"] = round(time.perf_counter() - t, 1)
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{building}" RENAME TO "{self.name}"')
            admin.execute(f"COMMENT ON DATABASE \"{self.name}\" IS '{time.time():.0f}'")
        return info

    def describe(self) -> dict[str, Any]:
        import psycopg

        with psycopg.connect(self.url) as conn:
            version = conn.execute("show server_version").fetchone()
            size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return {"postgres": version[0] if version else None,
                "db_mb": round(size[0] / 1e6) if size else None}


class _PgCompat:
    """`conn.execute(sql)` on psycopg for the builder's parameterless SQL (so `%` in a
    LIKE pattern stays literal)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str) -> Any:
        return self.conn.execute(sql)

    def commit(self) -> None:
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()


# -- the endpoints -----------------------------------------------------------------------

def endpoints(base: str) -> list[tuple[str, str]]:
    """(name, path) of every read to measure; ids and cursors are taken from the data."""
    s = requests.Session()

    def get(path: str) -> Any:
        r = s.get(base + path, timeout=120)
        r.raise_for_status()
        return r.json()

    first = get("/api/v1/jobs?limit=50")
    cursor = first["next_cursor"]
    deep = cursor
    for _ in range(100):  # 5,000 jobs into the listing
        page = get(f"/api/v1/jobs?limit=50&cursor={quote(deep)}")
        if not page["next_cursor"]:
            break
        deep = page["next_cursor"]
    completed = get("/api/v1/jobs?limit=50&state=completed")
    archived = get("/api/v1/jobs?limit=1&state=archived")["jobs"]
    job_id = archived[0]["id"] if archived else first["jobs"][0]["id"]
    c_cursor = completed["next_cursor"] or ""
    schedules = get("/api/v1/periodic")
    sched_items = schedules.get("schedules", schedules) if isinstance(schedules, dict) \
        else schedules
    sched_id = sched_items[0]["id"] if sched_items else None
    out = [
        ("api jobs", "/api/v1/jobs?limit=50"),
        ("api jobs state=available", "/api/v1/jobs?limit=50&state=available"),
        ("api jobs state=completed", "/api/v1/jobs?limit=50&state=completed"),
        ("api jobs state=archived", "/api/v1/jobs?limit=50&state=archived"),
        ("api jobs queue=emails", "/api/v1/jobs?limit=50&queue=emails"),
        ("api jobs kind=charge_card", "/api/v1/jobs?limit=50&kind=charge_card"),
        ("api jobs queue+state", "/api/v1/jobs?limit=50&queue=webhooks&state=completed"),
        ("api jobs cursor page 2", f"/api/v1/jobs?limit=50&cursor={quote(cursor)}"),
        ("api jobs cursor page 101", f"/api/v1/jobs?limit=50&cursor={quote(deep)}"),
        ("api jobs state=completed page 2",
         f"/api/v1/jobs?limit=50&state=completed&cursor={quote(c_cursor)}"),
        ("api jobs partition_key", "/api/v1/jobs?limit=50&partition_key=tenant-07"),
        ("api jobs tags_all=vip", "/api/v1/jobs?limit=50&tags_all=vip"),
        ("api jobs/counts", "/api/v1/jobs/counts"),
        ("api jobs/counts queue", "/api/v1/jobs/counts?queue=emails"),
        ("api queues", "/api/v1/queues"),
        ("api job by id", f"/api/v1/jobs/{quote(job_id)}"),
        ("page /", "/"),
        ("page /queues/emails", "/queues/emails"),
        ("page /jobs", "/jobs"),
        ("page /jobs?state=completed", "/jobs?state=completed"),
        ("page /jobs?queue=billing", "/jobs?queue=billing"),
        ("page /jobs?q=kind", "/jobs?q=kind:charge_card"),
        ("page /jobs?q=<kind prefix>", "/jobs?q=send_"),
        # The rate-classes page's link to a class's waiting jobs (sms: a handful).
        ("page /jobs?q=rate_class", "/jobs?q=rate_class:sms&state=available"),
        # The partitions page's link to a partition's jobs.
        ("page /jobs?q=partition", "/jobs?queue=emails&q=partition:tenant-07"),
        ("page /jobs cursor", f"/jobs?cursor={quote(cursor)}"),
        ("page /jobs?job=<id>", f"/jobs?job={quote(job_id)}"),
        ("page /rate-classes", "/rate-classes"),
        ("page /concurrency", "/concurrency"),
        ("page /partitions?queue=emails", "/partitions?queue=emails"),
        ("page /quarantine", "/quarantine"),
        ("page /periodic", "/periodic"),
        ("page /workers", "/workers"),
        ("page /cluster", "/cluster"),
    ]
    if sched_id:
        out.append(("page /periodic/<id>", f"/periodic/{quote(sched_id)}"))
    return out


def agg(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2),
            "max": round(max(values), 2)}


def use_snapshot(ref: str) -> str:
    """Import headgate from `git archive <ref>` (cached under /tmp) in this process and in
    the servers it starts; returns what is measured (a commit, or `describe --dirty`)."""
    git = ["git", "-C", str(ROOT)]
    if ref == "worktree":
        done = subprocess.run([*git, "describe", "--always", "--dirty"], capture_output=True,
                              text=True, check=False)
        return done.stdout.strip() or "worktree"
    sha = subprocess.run([*git, "rev-parse", "--short", ref], capture_output=True, text=True,
                         check=True).stdout.strip()
    src = Path(f"/tmp/hg-inspect-src/{sha}")
    if not (src / ".hg-commit").exists():
        src.mkdir(parents=True, exist_ok=True)
        # Before the migrations moved under headgate/, they lay in a top-level db/.
        has_db = subprocess.run([*git, "cat-file", "-e", f"{sha}:db"],
                                capture_output=True, check=False).returncode == 0
        paths = ["headgate", "db"] if has_db else ["headgate"]
        archive = subprocess.run([*git, "archive", sha, *paths], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        (src / ".hg-commit").write_text(sha + "\n")
    sys.path.insert(0, str(src))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(src), str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                                 else []))
    return sha


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--store", choices=("sqlite", "pg"), default="sqlite")
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200, help="GETs per endpoint per run")
    ap.add_argument("--budget", type=float, default=8.0,
                    help="seconds per endpoint per run before a slow one stops (>= 20 GETs)")
    ap.add_argument("--threads", type=int, default=16, help="gunicorn gthread threads")
    ap.add_argument("--pg-url", default=None,
                    help="server for --store pg (default HG_PG, HG_TEST_PG, then the peer "
                         "harness's PEERS_PG_* cluster)")
    ap.add_argument("--rebuild", action="store_true", help="ignore the cached database")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--only", default=None, help="comma-separated substrings of endpoint names")
    ap.add_argument("--markdown", action="store_true", help="also print a markdown table")
    ap.add_argument("--ref", default="HEAD",
                    help="headgate commit to measure (git archive snapshot), or 'worktree'")
    args = ap.parse_args(argv)
    measured = use_snapshot(args.ref)
    import headgate
    from bench import api as api_bench  # server start/stop and latency sampling

    target: SqliteTarget | PgTarget
    if args.store == "sqlite":
        target = SqliteTarget(args.jobs, args.rebuild)
    else:
        admin = args.pg_url or os.environ.get("HG_PG") or os.environ.get("HG_TEST_PG") or (
            f"postgresql://{os.environ.get('PEERS_PG_USER', 'postgres')}@"
            f"{os.environ.get('PEERS_PG_HOST', '127.0.0.1')}:"
            f"{os.environ.get('PEERS_PG_PORT', '5439')}/postgres")
        target = PgTarget(args.jobs, args.rebuild, admin)
    built = target.ensure()
    if built is not None:
        log(json.dumps({"built": args.jobs, **built}))
    else:
        log(f"reusing the cached database ({target.url})")
    store = headgate.open_store(target.url)  # also applies any newer migration, untimed
    try:
        heartbeat_fleet(store)
        counts = store.counts()
    finally:
        store.close()
    if args.build_only:
        print(json.dumps({"built": built, "counts": counts}))
        return 0

    info = {"store": args.store, "jobs_in_db": sum(counts.values()), "counts": counts,
            "commit": measured, "headgate_from": os.path.dirname(headgate.__file__),
            "python": platform.python_version(), "cpus": os.cpu_count(),
            **target.describe()}
    log(json.dumps(info))
    results: dict[str, dict[str, list[float]]] = {}
    names: list[tuple[str, str]] = []
    loads: list[float] = []  # the 1-minute load average as each run starts and ends
    for run in range(args.runs):
        loads.append(os.getloadavg()[0])
        proc, base = api_bench.start_server(target.url, args.threads, startup_s=600)
        try:
            eps = endpoints(base)
            if args.only:
                wanted = [w.strip() for w in args.only.split(",")]
                eps = [e for e in eps if any(w in e[0] for w in wanted)]
            if not names:
                names = eps
            for name, path in eps:
                p50, p99, n = api_bench.latency_samples(base, path, 1, args.requests,
                                                        budget_s=args.budget)
                r = results.setdefault(name, {"p50": [], "p99": [], "n": []})
                r["p50"].append(p50)
                r["p99"].append(p99)
                r["n"].append(n)
                log(f"run {run + 1} {name}: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({n} GETs)")
        finally:
            api_bench.stop_server(proc)
        loads.append(os.getloadavg()[0])
        log(f"run {run + 1}: load average {loads[-2]:.2f} -> {loads[-1]:.2f}")
    summary: dict[str, Any] = {"store": args.store, "jobs_in_db": info["jobs_in_db"],
                               "runs": args.runs, "target_p99_ms": TARGET_P99_MS}
    rows = []
    misses = []
    for name, path in names:
        r = results[name]
        p99 = statistics.median(r["p99"])
        ok = p99 < TARGET_P99_MS
        if not ok:
            misses.append(name)
        line = {"bench": "inspect", "store": args.store, "endpoint": name,
                "path": path if len(path) < 120 else path[:117] + "...",
                "p50_ms": agg(r["p50"]), "p99_ms": agg(r["p99"]), "gets_per_run": r["n"],
                "pass": ok}
        print(json.dumps(line), flush=True)
        rows.append((name, r, ok))
    summary["pass"] = len(names) - len(misses)
    summary["miss"] = misses
    summary["load_1m"] = {"median": round(statistics.median(loads), 2),
                          "min": round(min(loads), 2), "max": round(max(loads), 2)}
    summary.update({k: v for k, v in info.items() if k not in summary})
    print(json.dumps({"summary": summary}), flush=True)
    if args.markdown:
        print()
        print(f"| endpoint ({args.store}, {info['jobs_in_db']:,} jobs) | p50 ms | p99 ms "
              "| p99 < 50 ms |")
        print("|---|---|---|---|")
        for name, r, ok in rows:
            print(f"| {name} | {statistics.median(r['p50']):.1f} | "
                  f"{statistics.median(r['p99']):.1f} | {'PASS' if ok else 'MISS'} |")
        load = summary["load_1m"]
        print(f"\n1-minute load average at run starts and ends: median {load['median']}, "
              f"{load['min']}–{load['max']} ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
