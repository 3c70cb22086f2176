"""headgate through the peer harness: the SAME four workloads and method as the peers.

    .venv/bin/python bench/peers_headgate.py --store sqlite [--policies] [--n 20000] [--runs 3]
    .venv/bin/python bench/peers_headgate.py --store pg     [--policies] ...

The harness is the peers' own ``common.py`` (imported by path from ``HG_PEERS_DIR``,
default ``../shared/peers`` next to the repository; never copied), so W1–W4, the run
count, the fresh storage per run, the side-effect files, the exactly-once check, the
medians and the JSON lines are exactly the peers'. Only the ``Peer`` below is ours:

- W1: ``Client.enqueue(kind, payload)``, one call (one transaction) per job;
- W2: ``Client.enqueue_many`` with batches of 1000 ``Envelope`` objects;
- W3/W4: ``headgate worker --app bench.peer_app:make_worker --store URL
  --concurrency 2`` as a subprocess (the console script of this venv);
- fresh storage: a new SQLite file per run (WAL, synchronous=NORMAL — the adapter's
  defaults), or ``DROP DATABASE … WITH (FORCE)`` / ``CREATE DATABASE`` on the PostgreSQL
  server of ``--pg-url``, else ``HG_PG``, else ``HG_TEST_PG``, else the peers'
  ``PEERS_PG_*`` settings (their loopback cluster on 127.0.0.1:5439).

``--policies`` runs the same workloads with every admission policy in play: each job in
a rate class (a limit far above what N jobs need, so it never throttles but is evaluated
on every claim), spread round-robin over 50 partitions, under a concurrency ceiling on
the queue (max_concurrent far above concurrency 2). The name gets ``+policies``.

``--concurrency C`` other than 2 names the row ``headgate[pg,cC]`` (bench/compare.sh's
matched in-flight W3 row runs ``--concurrency 10``).

``--cpu`` adds CPU microseconds per job to the W1-W3 lines, as bench/compare.sh does for
every row by running this script under bench/cpu_meter.py (see there); on PostgreSQL the
server's part needs its processes on this machine.

``--profile DIR`` (diagnosis only; figures are then not comparable and the name gets
``~profiled``): the producer's timed W1/W2 loops run under cProfile (``DIR/w1-N.prof``),
and the worker runs under ``py-spy record`` when py-spy is found (``HG_PYSPY`` or PATH),
writing collapsed stacks to ``DIR/<workload>-worker-N.txt``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = os.path.abspath(os.environ.get("HG_PEERS_DIR") or ROOT.parent / "shared" / "peers")
# HG_SRC: import headgate from this directory (a snapshot of a commit, as bench/compare.sh
# makes) instead of the working tree, so a long comparison measures one version.
SRC = os.path.abspath(os.environ.get("HG_SRC") or ROOT)
sys.path.insert(0, PEERS_DIR)
sys.path.insert(0, str(ROOT))
sys.path.insert(0, SRC)

if not os.path.exists(os.path.join(PEERS_DIR, "common.py")):
    # Every workload is the harness's own code: without it there is nothing to run.
    sys.exit(f"bench: the peer harness (common.py) is not in {PEERS_DIR}; "
             "set HG_PEERS_DIR to the peers' folder")
import common  # type: ignore[import-not-found]  # noqa: E402

import headgate  # noqa: E402
from headgate import Client, Envelope  # noqa: E402

QUEUE = "bench"  # bench/peer_app.py works this queue
PARTITIONS = 50
RATE_CLASS = "bench-rate"
CEILING = "bench-ceiling"


def admin_pg_url(explicit: str | None) -> str:
    """A URL on the PostgreSQL server to create/drop benchmark databases from."""
    url = explicit or os.environ.get("HG_PG") or os.environ.get("HG_TEST_PG")
    return url or common.pg_dsn("postgres")


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def headgate_argv() -> list[str]:
    """`headgate` itself: the console script installed next to this interpreter."""
    script = Path(sys.executable).with_name("headgate")
    return [str(script)] if script.exists() else [sys.executable, "-m", "headgate.cli"]


def git_commit() -> str | None:
    """The measured code: the snapshot's commit, else `git describe --always --dirty`."""
    stamp = Path(SRC) / ".hg-commit"
    if stamp.exists():
        return stamp.read_text().strip()
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def install_policies(store: Any) -> None:
    # Evaluated on every claim, never binding: 10M tokens per second for N <= 1M jobs,
    # and a ceiling of 1000 concurrent jobs on a queue worked with concurrency 2.
    store.upsert_rate_class(RATE_CLASS, limit=10_000_000, window_ms=1_000, burst=10_000_000)
    store.upsert_concurrency_limit(CEILING, queue=QUEUE, max_concurrent=1_000,
                                   on_saturated="queue")


class HeadgatePeer(common.Peer):  # type: ignore[misc]
    batch_api = True

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.kind: str = args.store
        self.policies: bool = args.policies
        # A worker concurrency other than the harness's 2 is a different row (the matched
        # in-flight W3 runs --concurrency 10 against pgqueuer's default worker).
        tags = self.kind + ("+policies" if self.policies else "")
        if args.concurrency != 2:
            tags += f",c{args.concurrency}"
        self.name = f"headgate[{tags}]"
        self.profile_dir: Path | None = Path(args.profile) if args.profile else None
        if self.profile_dir is not None:
            self.profile_dir.mkdir(parents=True, exist_ok=True)
            self.name += "~profiled"
        self.producer_desc = "Client(store).enqueue(kind, payload) (one transaction per job)"
        self.batch_desc = f"Client(store).enqueue_many([Envelope x {args.batch}])"
        self.worker_desc = (f"headgate worker --app bench.peer_app:make_worker --concurrency "
                            f"{args.concurrency} (1 process: dispatcher thread + "
                            f"{args.concurrency} handler threads)")
        if self.policies:
            self.worker_desc += (f"; rate class + {PARTITIONS} partitions + concurrency "
                                 "ceiling evaluated on every claim")
        self.tmp = Path(tempfile.mkdtemp(prefix="hg-peers-db-"))
        self.admin_url = admin_pg_url(args.pg_url) if self.kind == "pg" else ""
        # Per process: two benchmarks on one server must not drop each other's database.
        self.db_name = f"bench_headgate{'_policies' if self.policies else ''}_{os.getpid()}"
        self.url = ""
        self.run = 0
        self.store: Any = None
        self.client: Client | None = None
        self._counter: dict[str, int] = {}
        self._filling = False

    # -- storage ----------------------------------------------------------------------
    def versions(self) -> dict[str, Any]:
        out: dict[str, Any] = {"headgate": headgate.__version__, "commit": git_commit()}
        if self.kind == "sqlite":
            out["sqlite"] = sqlite3.sqlite_version
        else:
            import psycopg

            with psycopg.connect(self.admin_url) as conn:
                row = conn.execute("show server_version").fetchone()
                out["postgres"] = row[0] if row else None
            out["psycopg"] = psycopg.__version__
        return out

    def reset(self) -> None:
        self.run += 1
        if self.kind == "sqlite":
            for old in self.tmp.glob("run*.db*"):
                old.unlink()
            self.url = f"sqlite:///{self.tmp}/run{self.run}.db"
        else:
            import psycopg

            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{self.db_name}"')
            self.url = with_database(self.admin_url, self.db_name)
        store = headgate.open_store(self.url)  # the schema (migrations), untimed
        try:
            if self.policies:
                install_policies(store)
        finally:
            store.close()

    def cleanup(self) -> None:
        if self.kind == "pg" and self.admin_url:
            import psycopg

            try:
                with psycopg.connect(self.admin_url, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            except psycopg.Error as exc:
                common.log(f"[{self.name}] could not drop {self.db_name}: {exc}")
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- producer ---------------------------------------------------------------------
    def open_producer(self) -> None:
        self.store = headgate.open_store(self.url)
        self.client = Client(self.store)

    def close_producer(self) -> None:
        if self.store is not None:
            self.store.close()
        self.store = None
        self.client = None

    def _fields(self, i: int) -> dict[str, Any]:
        if not self.policies:
            return {"queue": QUEUE}
        return {"queue": QUEUE, "rate_class": RATE_CLASS,
                "partition_key": f"tenant-{i % PARTITIONS:02d}"}

    def enqueue_one(self, i: int) -> None:
        assert self.client is not None
        self.client.enqueue("noop", b"%d" % i, **self._fields(i))

    def enqueue_batch(self, ids: list[int]) -> None:
        assert self.client is not None
        self.client.enqueue_many(
            [Envelope(kind="noop", payload=b"%d" % i, **self._fields(i)) for i in ids])

    def enqueue_lat(self, i: int, t_enq: float) -> None:
        assert self.client is not None
        self.client.enqueue("lat", b"%d %.6f" % (i, t_enq), **self._fields(i))

    def _profiled(self, what: str, fn: Any, arg: Any) -> None:
        if self.profile_dir is None:
            fn(arg)
            return
        n = self._counter[what] = self._counter.get(what, 0) + 1
        prof = cProfile.Profile()
        prof.runcall(fn, arg)
        prof.dump_stats(str(self.profile_dir / f"{what}-{n}.prof"))

    def single_loop(self, ids: Iterable[int]) -> None:
        ids = list(ids)
        if len(ids) <= 100:  # the harness's warm-up call: not profiled
            super().single_loop(ids)
        else:
            self._profiled("w1", super().single_loop, ids)

    def fill(self, n: int, batch: int) -> None:
        self._filling = True
        try:
            super().fill(n, batch)
        finally:
            self._filling = False

    def batch_loop(self, batches: Iterable[list[int]]) -> None:
        batches = list(batches)
        if len(batches) <= 1 or self._filling:
            super().batch_loop(batches)
        else:
            self._profiled("w2", super().batch_loop, batches)

    # -- worker -----------------------------------------------------------------------
    def worker_env(self) -> dict[str, str]:
        # common._worker_env puts the peers' dir first on PYTHONPATH; headgate's source
        # (HG_SRC) and the repository (for `bench.peer_app`) follow.
        pythonpath = os.environ.get("PYTHONPATH", "")
        path = os.pathsep.join(dict.fromkeys([SRC, str(ROOT)]))
        return {"PYTHONPATH": path + (os.pathsep + pythonpath if pythonpath else ""),
                "HG_SRC": SRC,
                "HG_PEERS_DIR": PEERS_DIR}

    def worker_argv(self, concurrency: int) -> list[str]:
        argv = [*headgate_argv(), "worker", "--app", "bench.peer_app:make_worker",
                "--store", self.url, "--concurrency", str(concurrency),
                "--log-level", "WARNING"]
        if self.profile_dir is not None:
            spy = os.environ.get("HG_PYSPY") or shutil.which("py-spy")
            if spy:
                n = self._counter["worker"] = self._counter.get("worker", 0) + 1
                out = self.profile_dir / f"worker-{n}.txt"
                # The harness stops a worker with SIGTERM; py-spy writes its file on
                # SIGINT, so a shell in between turns the one into the other.
                argv = ["sh", "-c", '"$@" & spy=$!; trap "kill -INT $spy" TERM; '
                        'wait $spy; wait $spy', "sh", spy, "record", "--format", "raw",
                        "--rate", "200", "--threads", "--output", str(out), "--", *argv]
        return argv


def main() -> None:
    ap = common.parse_args()
    ap.description = (__doc__ or "").split("\n\n")[0]
    ap.add_argument("--store", choices=["sqlite", "pg"], default="sqlite")
    ap.add_argument("--policies", action="store_true",
                    help="rate class + 50 partitions + concurrency ceiling on every job")
    ap.add_argument("--pg-url", default=None,
                    help="server for --store pg (default: HG_PG, HG_TEST_PG, PEERS_PG_*)")
    ap.add_argument("--profile", metavar="DIR", default=None,
                    help="cProfile the producer and py-spy the worker into DIR (diagnosis)")
    ap.add_argument("--cpu", action="store_true",
                    help="add CPU us per job (producer, worker, server) to W1-W3")
    args = ap.parse_args()
    peer = HeadgatePeer(args)
    if args.cpu:
        from bench.cpu_meter import find_postmaster, install

        postmaster = None
        if peer.kind == "pg":
            try:
                postmaster = find_postmaster(peer.admin_url)
            except Exception as exc:  # no server part then, said once
                common.log(f"[{peer.name}] no server CPU: {' '.join(str(exc).split())}")
        install(common, postmaster)
    try:
        common.main(peer, args=args)
    finally:
        peer.cleanup()


if __name__ == "__main__":
    main()
