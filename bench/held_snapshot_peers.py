"""The drain through a held snapshot for the PostgreSQL peers: held_snapshot.py's phases.

    /tmp/peers-venv/bin/python bench/held_snapshot_peers.py --system pgqueuer \\
        --pg-url postgresql://postgres@127.0.0.1:5439/postgres [--out FILE]
    /tmp/peers-venv/bin/python bench/held_snapshot_peers.py --system procrastinate --pg-url …

The same run as `bench/held_snapshot.py --store pg`, with a peer in headgate's place, so
the two compare like for like: the same flags (`--rate`, `--tick-ms`, `--clean`,
`--hold`, `--released`), a fresh database created on the server of `--pg-url` and
dropped afterwards, the same snapshot holder, per-second sampler and per-phase summaries
(bench/held_phases.py, which imports nothing of headgate: this runs in the peer harness's
venv, /tmp/peers-venv from its requirements.txt), and the same JSON plus `system`,
`table`, `worker`, `producer` and `versions`. The held snapshot reads the peer's job
table, and dead/live tuples are that table's. The oldest transaction's age and xmin age
come from the query headgate's `/metrics` runs.

The peer's schema is installed as the peer harness installs it (HG_PEERS_DIR, default
../shared/peers), and its job functions are the harness's (pgqueuer_app.py,
procrastinate_app.py): each appends the job's number to a file (`common.record_drain`),
so completions are counted outside the store. A producer thread enqueues `--rate` jobs
a second with the peer's own batch API, the due ones every tick; one worker runs as a
subprocess:

- pgqueuer: `SyncQueries(SyncPsycopgDriver(conn)).enqueue([...], [...], [...])`
  (psycopg, autocommit); the worker is the harness's `pgq_worker.py pgqueuer_app:main`
  (`pgq run`) with pgqueuer's defaults, as its `pgqueuer[worker=default]` row runs it:
  batch size 10, no cap on jobs in flight (`--concurrency` does not apply; pgqueuer's
  cap, `--max-concurrent-tasks`, needs batch size 1). Table `pgqueuer`: a finished
  job's row is deleted (its record goes to `pgqueuer_log`).
- procrastinate: `noop.batch_defer(*[{"i": i}, ...])` on the sync `App.open()` pool;
  the worker is `procrastinate worker --concurrency 10` (one process, asyncio, `async
  def` tasks, LISTEN/NOTIFY). Table `procrastinate_jobs`: finished jobs stay as
  `succeeded` (the worker's default `delete_jobs` is never), so live tuples grow with
  every job.

It loads the machine for the whole run (default 60 + 600 + 60 s): run it on a quiet
machine; `--rate 50 --clean 5 --hold 10 --released 5` checks that it works.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import subprocess
import sys
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
PEERS_DIR = Path(os.environ.get("HG_PEERS_DIR") or HERE.parent.parent / "shared" / "peers")
sys.path.insert(0, str(HERE))

from fixed_rate import RateProducer, Sender  # noqa: E402
from held_phases import (  # noqa: E402
    Snapshot,
    pg_horizon,
    pg_tuples,
    records,
    run_in_tmp,
    run_phases,
    summarize,
)


class Peer(ABC):
    """One peer's producer, schema and worker on the run's database."""

    system = ""
    table = ""
    producer_desc = ""
    concurrency: int | None = None
    unavailable: tuple[type[BaseException], ...] = ()

    def __init__(self, dsn: str, concurrency: int) -> None:
        self.dsn = dsn

    @abstractmethod
    def install(self) -> None:
        """The peer's schema, as the harness installs it."""

    @abstractmethod
    def open_producer(self) -> None:
        """The producer's connection, in the producer's thread."""

    @abstractmethod
    def enqueue(self, numbers: range) -> None:
        """One batch with the peer's own API, each job carrying its number."""

    @abstractmethod
    def close_producer(self) -> None: ...

    @abstractmethod
    def worker_argv(self) -> list[str]: ...

    @abstractmethod
    def worker_desc(self) -> str: ...

    @contextmanager
    def session(self) -> Iterator[Sender]:
        """fixed_rate.RateProducer's session: this peer's batch API."""
        self.open_producer()
        try:
            yield (lambda first, n: self.enqueue(range(first, first + n)), self.unavailable)
        finally:
            self.close_producer()

    def worker_env(self) -> dict[str, str]:
        return {}

    def packages(self) -> tuple[str, ...]:
        return (self.system, "psycopg")


class Pgqueuer(Peer):
    system = "pgqueuer"
    table = "pgqueuer"
    producer_desc = ("SyncQueries(SyncPsycopgDriver(psycopg conn, autocommit))"
                     ".enqueue([...entrypoints], [...payloads], [...priorities])")

    def __init__(self, dsn: str, concurrency: int) -> None:
        import psycopg

        super().__init__(dsn, concurrency)
        self.unavailable = (psycopg.OperationalError,)

    def install(self) -> None:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        async def install() -> None:
            conn = await asyncpg.connect(self.dsn)
            try:
                await Queries(AsyncpgDriver(conn)).install()
            finally:
                await conn.close()

        asyncio.run(install())

    def open_producer(self) -> None:
        import psycopg
        from pgqueuer.adapters.drivers.psycopg import SyncPsycopgDriver
        from pgqueuer.queries import SyncQueries

        self.conn = psycopg.connect(self.dsn, autocommit=True)
        self.queries = SyncQueries(SyncPsycopgDriver(self.conn))

    def enqueue(self, numbers: range) -> None:
        n = len(numbers)
        self.queries.enqueue(["noop"] * n, [b"%d" % i for i in numbers], [0] * n)

    def close_producer(self) -> None:
        self.conn.close()

    def worker_argv(self) -> list[str]:
        # The harness's stand-in for `pgq run`, which crashes at start-up in this version.
        return [sys.executable, str(PEERS_DIR / "pgq_worker.py"), "pgqueuer_app:main",
                "--log-level", "WARNING"]

    def worker_desc(self) -> str:
        return ("pgq_worker.py (= pgq run) pgqueuer_app:main with pgqueuer's defaults: "
                "batch size 10, no cap on jobs in flight (one process, asyncio/uvloop)")

    def worker_env(self) -> dict[str, str]:
        return {"BENCH_PGQ_DSN": self.dsn, "BENCH_PGQ_ENTRYPOINT_LIMIT": "0"}

    def packages(self) -> tuple[str, ...]:
        return ("pgqueuer", "asyncpg", "psycopg")


class Procrastinate(Peer):
    system = "procrastinate"
    table = "procrastinate_jobs"
    producer_desc = "noop.batch_defer(*[{'i': i} ...]) (sync, App.open() -> psycopg pool)"

    def __init__(self, dsn: str, concurrency: int) -> None:
        super().__init__(dsn, concurrency)
        self.concurrency = concurrency
        # procrastinate_app.py reads these when imported.
        os.environ["BENCH_TASK_KIND"] = "async"
        os.environ["BENCH_PROCRASTINATE_DSN"] = dsn
        import procrastinate_app
        from procrastinate.exceptions import ConnectorException

        self.m = procrastinate_app
        self.unavailable = (ConnectorException,)

    def install(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(self.m.app.schema_manager.get_schema())

    def open_producer(self) -> None:
        self.m.app.open()

    def enqueue(self, numbers: range) -> None:
        self.m.noop.batch_defer(*[{"i": i} for i in numbers])

    def close_producer(self) -> None:
        self.m.app.close()

    def worker_argv(self) -> list[str]:
        return [sys.executable, "-m", "procrastinate", "--app=procrastinate_app.app",
                "--log-level", "warning", "worker", "--concurrency", str(self.concurrency)]

    def worker_desc(self) -> str:
        return (f"procrastinate worker --concurrency {self.concurrency} (one process, asyncio; "
                "async def tasks; LISTEN/NOTIFY on)")

    def worker_env(self) -> dict[str, str]:
        return {"BENCH_PROCRASTINATE_DSN": self.dsn, "BENCH_TASK_KIND": "async"}

    def packages(self) -> tuple[str, ...]:
        return ("procrastinate", "psycopg", "psycopg-pool")


SYSTEMS: dict[str, type[Peer]] = {"pgqueuer": Pgqueuer, "procrastinate": Procrastinate}


class Database:
    """A fresh database on the server of `server_url`, dropped by `drop`."""

    def __init__(self, server_url: str, system: str) -> None:
        import psycopg

        self.server_url = server_url
        self.name = f"hgheld_{system}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        parts = urlsplit(server_url)
        self.url = urlunsplit((parts.scheme, parts.netloc, "/" + self.name, "", ""))

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class WorkerProc:
    """The peer's worker in its own session, stopped by its pid (and its group)."""

    def __init__(self, argv: list[str], env: dict[str, str], logpath: Path) -> None:
        self.logf = logpath.open("ab")
        self.p = subprocess.Popen(argv, env=env, cwd=PEERS_DIR, stdout=self.logf,
                                  stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self) -> int | None:
        code = self.p.poll()
        if code is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                code = self.p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(5)
        self.logf.close()
        return code


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import common  # the peer harness's (record_drain's record size, package versions)
    import psycopg

    db = Database(args.pg_url, args.system)
    gauges_conn = worker = producer = None
    try:
        peer = SYSTEMS[args.system](db.url, args.concurrency)
        peer.install()
        done_file = tmp / "drain.txt"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
        env.update(peer.worker_env())
        env.update({"BENCH_DRAIN_FILE": str(done_file), "BENCH_LAT_FILE": str(tmp / "lat.txt"),
                    "PYTHONPATH": os.pathsep.join([str(PEERS_DIR), env.get("PYTHONPATH", "")]),
                    "PYTHONUNBUFFERED": "1"})
        gauges_conn = psycopg.connect(db.url, autocommit=True)
        server = gauges_conn.execute("SHOW server_version").fetchone()[0]
        worker = WorkerProc(peer.worker_argv(), env, tmp / "worker.log")
        producer = RateProducer(args.rate, args.tick_ms / 1000, peer.session)

        def gauges() -> dict[str, Any]:
            return {**pg_tuples(gauges_conn, peer.table), **pg_horizon(gauges_conn)}

        def check() -> None:
            if not worker.alive():
                raise RuntimeError(f"the worker exited; see {tmp}/worker.log")

        producer.start()
        phases = run_phases(
            (args.clean, args.hold, args.released),
            lambda: Snapshot("pg", db.url, None, peer.table),
            lambda: records(done_file, common.DRAIN_REC), lambda: producer.produced,
            gauges, check)
    finally:
        if producer is not None:
            producer.stop.set()
            producer.join(30)
        code = worker.stop() if worker is not None else None
        if gauges_conn is not None:
            gauges_conn.close()
        db.drop()
    ids = done_file.read_bytes().split() if done_file.exists() else []
    return {
        "bench": "held_snapshot", "system": args.system, "store": "pg", "rate": args.rate,
        "concurrency": peer.concurrency, "table": peer.table, "worker": peer.worker_desc(),
        "producer": peer.producer_desc,
        "seconds": {"clean": args.clean, "hold": args.hold, "released": args.released},
        **summarize(phases.samples, args.rate),
        "produced": producer.produced, "completed": len(ids),
        "completed_twice": len(ids) - len(set(ids)), "held_snapshot_rows": phases.held_rows,
        "producer_errors": len(producer.errors), "worker_exit_code": code,
        "versions": {**common.pkg_versions(*peer.packages()), "postgres": server},
        "python": platform.python_version(), "cpus": os.cpu_count(), "samples": phases.samples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=sorted(SYSTEMS), required=True)
    ap.add_argument("--pg-url", default=os.environ.get("HG_TEST_PG") or os.environ.get("HG_PG"),
                    help="server URL (a database is created for the run)")
    ap.add_argument("--rate", type=float, default=600.0, help="jobs enqueued per second")
    ap.add_argument("--tick-ms", type=float, default=20.0, help="the producer's tick")
    ap.add_argument("--concurrency", type=int, default=10,
                    help="procrastinate's worker --concurrency (pgqueuer runs its defaults)")
    ap.add_argument("--clean", type=int, default=60, help="seconds before the snapshot")
    ap.add_argument("--hold", type=int, default=600, help="seconds the snapshot is held")
    ap.add_argument("--released", type=int, default=60, help="seconds after the release")
    ap.add_argument("--out", help="write the JSON here instead of stdout")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the worker log")
    args = ap.parse_args()
    if not args.pg_url:
        ap.error("--pg-url is needed (or HG_TEST_PG / HG_PG)")
    if min(args.clean, args.hold, args.released) < 1 or args.rate <= 0:
        ap.error("every phase needs at least a second, and --rate must be positive")
    if not (PEERS_DIR / "common.py").exists():
        ap.error(f"the peer harness is not at {PEERS_DIR} (set HG_PEERS_DIR)")
    sys.path.insert(1, str(PEERS_DIR))
    run_in_tmp(f"hg-bench-held-{args.system}-", f"bench/held_snapshot_peers.py: {args.system}",
               lambda tmp: run(args, tmp), keep=args.keep_tmp, out=args.out)


if __name__ == "__main__":
    main()
