"""The drain through a held snapshot: a fixed producer rate, one worker, three phases.

    .venv/bin/python bench/held_snapshot.py --store pg --pg-url postgresql://…/postgres
    .venv/bin/python bench/held_snapshot.py --store sqlite [--rate 600] [--hold 600]

A session that holds a snapshot (idle in transaction) keeps PostgreSQL's vacuum from
removing any row version written after it, and keeps SQLite's checkpoints from copying
any WAL frame past it: what that does to a queue shows only under a steady load for
minutes. On a fresh database (a new SQLite file, or a database created on the server of
`--pg-url` and dropped afterwards):

- a producer thread here enqueues `--rate` jobs a second (`Client.enqueue_many` of the
  jobs due, every `--tick-ms`; a producer that falls behind catches up, and the record
  says how many it made each second);
- one `headgate worker --app bench.worker:make_worker --concurrency 10` subprocess
  (duties on, as deployed) runs them; each run appends its job id to a file, so
  completions are counted outside the store;
- phases: `clean` (`--clean` s), `held` (`--hold` s: another connection opens a
  REPEATABLE READ transaction on PostgreSQL, a read transaction on SQLite, runs
  `SELECT count(*) FROM jobs` and stays idle in it), `released` (`--released` s, after
  that transaction ends).

Every second it records completions (handler runs that second), jobs produced, the
backlog (produced − completed), and on PostgreSQL `n_dead_tup` / `n_live_tup` of `jobs`
(pg_stat_user_tables, refreshed by the server about once a second) with the oldest
transaction's age and xmin age as `/metrics` reports them (`Store.transaction_horizon`),
on SQLite the WAL file's size. The JSON (stdout, or `--out FILE`) has every second's sample and per
phase the median and min–max of each figure, plus how long after the release the
backlog took to fall to one second of production (`backlog_cleared_after_s`).

It loads the machine for the whole run (default 60 + 600 + 60 s): run it on a quiet
machine; `--clean 10 --hold 10 --released 10 --rate 100` checks that it works.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from fixed_rate import Producer  # noqa: E402
from worker import REC, Backend, WorkerProc, worker_env  # noqa: E402  (bench/worker.py)

import headgate  # noqa: E402

PHASES = ("clean", "held", "released")


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


class Snapshot:
    """A transaction on its own connection that read `jobs` and stays idle in it."""

    def __init__(self, kind: str, url: str, path: str | None) -> None:
        self.kind = kind
        self.conn: Any
        if kind == "pg":
            import psycopg

            self.conn = psycopg.connect(url)
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            self.rows = self.conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        else:
            assert path is not None
            self.conn = sqlite3.connect(path, isolation_level=None)
            self.conn.execute("BEGIN")
            self.rows = self.conn.execute("SELECT count(*) FROM jobs").fetchone()[0]

    def release(self) -> None:
        if self.kind == "pg":
            self.conn.rollback()
        else:
            self.conn.execute("COMMIT")
        self.conn.close()


class Gauges:
    """The store-side figures of a sample: dead/live tuples of `jobs`, or the WAL."""

    def __init__(self, kind: str, url: str, path: str | None) -> None:
        self.kind = kind
        self.path = path
        self.conn: Any = None
        self.store: Any = None
        if kind == "pg":
            import psycopg

            import headgate

            self.conn = psycopg.connect(url, autocommit=True)
            self.store = headgate.open_store(url, migrate=False)

    def read(self) -> dict[str, Any]:
        if self.kind == "pg":
            row = self.conn.execute(
                "SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables "
                "WHERE relname = 'jobs'").fetchone()
            h = self.store.transaction_horizon()
            age = h.oldest_transaction_ms
            return {"dead_tuples": row[0] if row else None,
                    "live_tuples": row[1] if row else None,
                    "oldest_transaction_s": None if age is None else age / 1000,
                    "xmin_age": h.xmin_age}
        try:
            return {"wal_bytes": os.path.getsize(f"{self.path}-wal")}
        except OSError:
            return {"wal_bytes": 0}

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.store is not None:
            self.store.close()


def spread(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(samples: list[dict[str, Any]], rate: float) -> dict[str, Any]:
    figures = ("completed", "produced", "backlog", "dead_tuples", "live_tuples", "wal_bytes",
               "oldest_transaction_s", "xmin_age")
    phases: dict[str, Any] = {}
    for phase in PHASES:
        rows = [s for s in samples if s["phase"] == phase]
        phases[phase] = {"seconds": len(rows)}
        for name in figures:
            values = [s[name] for s in rows if s.get(name) is not None]
            if values:
                phases[phase][name] = spread(values)
    cleared = next((s["t_phase"] for s in samples
                    if s["phase"] == "released" and s["backlog"] <= rate), None)
    return {"phases": phases, "backlog_cleared_after_s": cleared}


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    backend = Backend(args.store, tmp, args.pg_url)
    url = backend.fresh()
    path = url.removeprefix("sqlite:///") if args.store == "sqlite" else None
    env = worker_env(tmp)
    done_file = Path(env["BENCH_DRAIN_FILE"])
    done_file.unlink(missing_ok=True)
    gauges = Gauges(args.store, url, path)
    worker = WorkerProc(url, args.concurrency, env, tmp / "worker.log")
    producer = Producer(url, args.rate, args.tick_ms / 1000, lambda n: [
        headgate.Envelope(kind="noop", queue="bench") for _ in range(n)])
    snapshot: Snapshot | None = None
    samples: list[dict[str, Any]] = []
    held_rows = None
    try:
        producer.start()
        t0 = time.monotonic()
        last_done = last_produced = 0
        bounds = [(PHASES[0], args.clean), (PHASES[1], args.clean + args.hold),
                  (PHASES[2], args.clean + args.hold + args.released)]
        phase_start = 0
        for second in range(1, int(bounds[-1][1]) + 1):
            time.sleep(max(0.0, t0 + second - time.monotonic()))
            phase = next(name for name, end in bounds if second <= end)
            if phase == "held" and snapshot is None:
                snapshot = Snapshot(args.store, url, path)
                held_rows = snapshot.rows
                phase_start = second - 1
                log(f"held snapshot opened at {second - 1} s ({held_rows} rows seen)")
            if phase == "released" and snapshot is not None:
                snapshot.release()
                snapshot = None
                phase_start = second - 1
                log(f"snapshot released at {second - 1} s")
            done = done_file.stat().st_size // REC if done_file.exists() else 0
            produced = producer.produced
            sample = {"t": second, "phase": phase, "t_phase": second - phase_start,
                      "completed": done - last_done, "produced": produced - last_produced,
                      "backlog": produced - done, **gauges.read()}
            last_done, last_produced = done, produced
            samples.append(sample)
            if not worker.alive():
                raise RuntimeError(f"the worker exited; see {tmp}/worker.log")
            if second % 10 == 0:
                log(json.dumps(sample))
    finally:
        producer.stop.set()
        producer.join(30)
        if snapshot is not None:
            snapshot.release()
        code = worker.stop()
        gauges.close()
        backend.drop()
    ids = done_file.read_bytes().split() if done_file.exists() else []
    return {
        "bench": "held_snapshot", "store": args.store, "rate": args.rate,
        "concurrency": args.concurrency,
        "seconds": {"clean": args.clean, "hold": args.hold, "released": args.released},
        **summarize(samples, args.rate),
        "produced": producer.produced, "completed": len(ids),
        "completed_twice": len(ids) - len(set(ids)), "held_snapshot_rows": held_rows,
        "producer_errors": len(producer.errors), "worker_exit_code": code,
        "python": platform.python_version(), "cpus": os.cpu_count(), "samples": samples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=["sqlite", "pg"], default="sqlite")
    ap.add_argument("--pg-url", default=os.environ.get("HG_TEST_PG") or os.environ.get("HG_PG"),
                    help="server URL for --store pg (a database is created for the run)")
    ap.add_argument("--rate", type=float, default=600.0, help="jobs enqueued per second")
    ap.add_argument("--tick-ms", type=float, default=20.0, help="the producer's tick")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--clean", type=int, default=60, help="seconds before the snapshot")
    ap.add_argument("--hold", type=int, default=600, help="seconds the snapshot is held")
    ap.add_argument("--released", type=int, default=60, help="seconds after the release")
    ap.add_argument("--out", help="write the JSON here instead of stdout")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the database and logs")
    args = ap.parse_args()
    if args.store == "pg" and not args.pg_url:
        ap.error("--store pg needs --pg-url (or HG_TEST_PG / HG_PG)")
    if min(args.clean, args.hold, args.released) < 1 or args.rate <= 0:
        ap.error("every phase needs at least a second, and --rate must be positive")
    tmp = Path(tempfile.mkdtemp(prefix="hg-bench-held-"))
    log(f"bench/held_snapshot.py: tmp {tmp}")
    try:
        result = run(args, tmp)
    finally:
        if args.keep_tmp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
