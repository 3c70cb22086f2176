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
import os
import platform
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from fixed_rate import Producer  # noqa: E402
from held_phases import (  # noqa: E402
    Snapshot,
    commit,
    pg_tuples,
    records,
    run_in_tmp,
    run_phases,
    summarize,
)
from worker import REC, Backend, WorkerProc, worker_env  # noqa: E402  (bench/worker.py)

import headgate  # noqa: E402


class Gauges:
    """The store-side figures of a sample: dead/live tuples of `jobs`, or the WAL."""

    def __init__(self, kind: str, url: str, path: str | None) -> None:
        self.kind = kind
        self.path = path
        self.conn: Any = None
        self.store: Any = None
        if kind == "pg":
            import psycopg

            self.conn = psycopg.connect(url, autocommit=True)
            self.store = headgate.open_store(url, migrate=False)

    def read(self) -> dict[str, Any]:
        if self.kind == "pg":
            h = self.store.transaction_horizon()
            age = h.oldest_transaction_ms
            return {**pg_tuples(self.conn, "jobs"),
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

    def check() -> None:
        if not worker.alive():
            raise RuntimeError(f"the worker exited; see {tmp}/worker.log")

    try:
        producer.start()
        phases = run_phases(
            (args.clean, args.hold, args.released),
            lambda: Snapshot(args.store, url, path), lambda: records(done_file, REC),
            lambda: producer.produced, gauges.read, check)
    finally:
        producer.stop.set()
        producer.join(30)
        code = worker.stop()
        gauges.close()
        backend.drop()
    ids = done_file.read_bytes().split() if done_file.exists() else []
    return {
        "bench": "held_snapshot", "store": args.store, "rate": args.rate,
        "concurrency": args.concurrency,
        "seconds": {"clean": args.clean, "hold": args.hold, "released": args.released},
        **summarize(phases.samples, args.rate),
        "produced": producer.produced, "completed": len(ids),
        "completed_twice": len(ids) - len(set(ids)), "held_snapshot_rows": phases.held_rows,
        "producer_errors": len(producer.errors), "worker_exit_code": code,
        "commit": commit(), "python": platform.python_version(), "cpus": os.cpu_count(),
        "samples": phases.samples,
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
    run_in_tmp("hg-bench-held-", "bench/held_snapshot.py", lambda tmp: run(args, tmp),
               keep=args.keep_tmp, out=args.out)


if __name__ == "__main__":
    main()
