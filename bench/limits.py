"""Physical limits: what raw sqlite3 / raw psycopg do on headgate's job row, no headgate.

    .venv/bin/python bench/limits.py --store sqlite [--n 20000] [--runs 3] [--wal]
    .venv/bin/python bench/limits.py --store pg --pg-url postgresql://…/postgres ...

The ceiling each headgate figure is held against: the same durable commits
on the same row, with nothing of headgate's around them. One JSON line per loop, median
and min–max jobs/s over `--runs` runs, each run on fresh storage:

  insert_commit   N times: INSERT one job row, COMMIT               (W1's floor)
  batch_insert    N rows, `--batch` (1000) per transaction + COMMIT         (W2's)
                  SQLite: one INSERT executemany; PostgreSQL: COPY FROM STDIN
  claim_ack       N rows waiting (inserted first, untimed); then per job:
                  claim = UPDATE … SET state='running', lease … WHERE id = (the first
                  available row by the admission index) RETURNING id, COMMIT;
                  ack = UPDATE … SET state='completed' WHERE id AND lease, COMMIT.
                  Two durable commits a job, one row each: a worker that claims before
                  it runs and acks after, with no batching. (UPDATE to completed, not
                  DELETE: headgate keeps finished jobs for their retention.)
                  PostgreSQL's claim takes FOR UPDATE SKIP LOCKED, as any PG queue does.

The table: headgate's own `jobs` table, columns and indexes, taken from a database that
headgate's migrations just built (SQLite: the CREATE TABLE/INDEX text in sqlite_master;
PostgreSQL: CREATE TABLE … (LIKE jobs INCLUDING ALL) in that database), without
headgate's triggers and counter tables: they are headgate's cost, not the floor's. The
row: the one headgate's Client writes for the harness's W1 job (kind "noop", payload
b"%d"), read back from that database, with a fresh id of the same length per row.

Durability: SQLite with headgate's connection settings (page_size 1024, WAL,
synchronous=NORMAL, wal_autocheckpoint 40000, cache_size 64 MB), BEGIN IMMEDIATE;
PostgreSQL on the given server as configured (synchronous_commit is reported; the
harness's cluster runs stock settings, i.e. on), one connection over loopback TCP.

`--wal` adds WAL bytes per job for each loop (bench/walmeter.py): PostgreSQL from the
timed runs' LSN deltas; SQLite from one more, untimed, run per loop with the WAL pinned
(so its figure never slows the timed runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
SRC = os.path.abspath(os.environ.get("HG_SRC") or ROOT)  # a snapshot, as compare.sh makes
sys.path.insert(0, str(ROOT))
sys.path.insert(0, SRC)

import headgate  # noqa: E402
from headgate import Client  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from walmeter import PgWalMeter, SqliteWalMeter  # noqa: E402

QUEUE = "bench"
SQLITE_PRAGMAS = ("PRAGMA page_size = 1024", "PRAGMA journal_mode = WAL",
                  "PRAGMA synchronous = NORMAL", "PRAGMA wal_autocheckpoint = 40000",
                  "PRAGMA cache_size = -65536", "PRAGMA foreign_keys = OFF")


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


class Ids:
    """Ids as long as headgate's, increasing (as headgate's time-ordered ids are)."""

    def __init__(self, template: str) -> None:
        self.prefix = template[: len(template) - 12]

    def __call__(self, i: int) -> str:
        return f"{self.prefix}{i:012d}"


# -- SQLite -------------------------------------------------------------------------------

class SqliteRaw:
    kind = "sqlite"

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="hg-limits-")
        scratch = f"{self.tmp}/schema.db"
        store = headgate.open_store(f"sqlite:///{scratch}")
        try:
            Client(store).enqueue("noop", b"0", queue=QUEUE)
        finally:
            store.close()
        conn = sqlite3.connect(scratch)
        conn.row_factory = sqlite3.Row
        self.ddl = [r[0] for r in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'jobs' AND type IN "
            "('table', 'index') AND sql IS NOT NULL ORDER BY type = 'index', name")]
        row = conn.execute("SELECT * FROM jobs").fetchone()
        self.columns = list(row.keys())
        self.template = dict(row)
        conn.close()
        self.ids = Ids(str(self.template["id"]))
        self.path = ""
        self.run = 0
        self.conn: sqlite3.Connection | None = None

    def describe(self) -> dict[str, Any]:
        return {"sqlite": sqlite3.sqlite_version, "pragmas": list(SQLITE_PRAGMAS),
                "indexes": len(self.ddl) - 1}

    @contextlib.contextmanager
    def fresh(self) -> Iterator[None]:
        self.run += 1
        self.path = f"{self.tmp}/run{self.run}.db"
        conn = sqlite3.connect(self.path, isolation_level=None)
        for p in SQLITE_PRAGMAS:
            conn.execute(p)
        for stmt in self.ddl:
            conn.execute(stmt)
        self.conn = conn
        try:
            yield
        finally:
            conn.close()
            for f in Path(self.tmp).glob(f"run{self.run}.db*"):
                f.unlink()

    def row(self, i: int) -> tuple[Any, ...]:
        t = dict(self.template, id=self.ids(i), payload=b"%d" % i)
        return tuple(t[c] for c in self.columns)

    def _insert_sql(self) -> str:
        return (f"INSERT INTO jobs ({', '.join(self.columns)}) VALUES "
                f"({', '.join('?' for _ in self.columns)})")

    def insert_commit(self, ids: range) -> None:
        assert self.conn is not None
        sql, conn = self._insert_sql(), self.conn
        for i in ids:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(sql, self.row(i))
            conn.execute("COMMIT")

    def batch_insert(self, ids: range, batch: int) -> None:
        assert self.conn is not None
        sql, conn = self._insert_sql(), self.conn
        for s in range(ids.start, ids.stop, batch):
            rows = [self.row(i) for i in range(s, min(ids.stop, s + batch))]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(sql, rows)
            conn.execute("COMMIT")

    def claim_ack(self, n: int) -> None:
        assert self.conn is not None
        conn = self.conn
        partition = self.template["partition_key"]
        done = 0
        while done < n:
            now = time.time_ns() // 1_000_000
            lease = uuid.uuid4().hex
            conn.execute("BEGIN IMMEDIATE")
            got = conn.execute(
                "UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_id = ?, "
                "lease_expires_at_ms = ?, worker_id = 'limits', attempted_at_ms = ? "
                "WHERE rowid = (SELECT rowid FROM jobs WHERE queue = ? AND partition_key = ? "
                "AND state = 'available' ORDER BY priority DESC, rowid LIMIT 1) RETURNING id",
                (lease, now + 60_000, now, QUEUE, partition)).fetchone()
            conn.execute("COMMIT")
            if got is None:
                raise RuntimeError(f"claim found nothing with {n - done} left")
            conn.execute("BEGIN IMMEDIATE")
            cur = conn.execute(
                "UPDATE jobs SET state = 'completed', finalized_at_ms = ?, lease_id = NULL, "
                "lease_expires_at_ms = NULL WHERE id = ? AND lease_id = ?",
                (now, got[0], lease))
            conn.execute("COMMIT")
            if cur.rowcount != 1:
                raise RuntimeError("ack lost its lease")
            done += 1

    def wal_meter(self) -> SqliteWalMeter:
        return SqliteWalMeter(self.path)

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.tmp, ignore_errors=True)


# -- PostgreSQL ---------------------------------------------------------------------------

class PgRaw:
    kind = "pg"

    def __init__(self, admin_url: str) -> None:
        self.admin = admin_url
        self.db = f"hg_limits_{os.getpid()}"
        self.url = with_database(admin_url, self.db)
        self.conn: Any = None
        self.columns: list[str] = []
        self.types: list[str] = []
        self.template: dict[str, str | None] = {}
        self.ids: Ids | None = None

    def describe(self) -> dict[str, Any]:
        import psycopg

        with psycopg.connect(self.admin) as c:
            out = {k: c.execute(f"SHOW {k}").fetchone()[0]  # type: ignore[index]
                   for k in ("server_version", "synchronous_commit", "fsync",
                             "wal_level", "full_page_writes")}
        out["psycopg"] = psycopg.__version__
        return out

    @contextlib.contextmanager
    def fresh(self) -> Iterator[None]:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{self.db}"')
        try:
            store = headgate.open_store(self.url)  # headgate's schema, as migrated
            try:
                Client(store).enqueue("noop", b"0", queue=QUEUE)
            finally:
                store.close()
            conn = psycopg.connect(self.url, autocommit=True)
            conn.execute("CREATE TABLE raw_jobs (LIKE jobs INCLUDING ALL)")
            cols = conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'jobs'::regclass AND attnum > 0 AND NOT attisdropped "
                "AND attidentity = '' AND attgenerated = '' ORDER BY attnum").fetchall()
            self.columns = [c[0] for c in cols if c[0] != "rowid"]
            self.types = [c[1] for c in cols if c[0] != "rowid"]
            text = conn.execute(
                "SELECT " + ", ".join(f'"{c}"::text' for c in self.columns) + " FROM jobs"
            ).fetchone()
            self.template = dict(zip(self.columns, text, strict=True))
            self.ids = Ids(str(self.template["id"]))
            conn.execute("VACUUM ANALYZE raw_jobs")
            self.conn = conn
            conn.autocommit = False
            yield
        finally:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
            with psycopg.connect(self.admin, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')

    def _insert_sql(self) -> str:
        vals = ", ".join(f"%s::{t}" for t in self.types)
        return f"INSERT INTO raw_jobs ({', '.join(self.columns)}) VALUES ({vals})"

    def row(self, i: int) -> tuple[Any, ...]:
        assert self.ids is not None
        t = dict(self.template, id=self.ids(i), payload="\\x" + (b"%d" % i).hex())
        return tuple(t[c] for c in self.columns)

    def insert_commit(self, ids: range) -> None:
        sql, conn = self._insert_sql(), self.conn
        with conn.cursor() as cur:
            for i in ids:
                cur.execute(sql, self.row(i), prepare=True)
                conn.commit()

    def batch_insert(self, ids: range, batch: int) -> None:
        """COPY, PostgreSQL's fastest bulk path (twice executemany's rate here): the
        floor must be what the table allows, not what one client API does."""
        conn = self.conn
        copy = f"COPY raw_jobs ({', '.join(self.columns)}) FROM STDIN"
        for s in range(ids.start, ids.stop, batch):
            with conn.cursor() as cur, cur.copy(copy) as rows:
                for i in range(s, min(ids.stop, s + batch)):
                    rows.write_row(self.row(i))
            conn.commit()

    def claim_ack(self, n: int) -> None:
        conn = self.conn
        partition = self.template["partition_key"]
        done = 0
        with conn.cursor() as cur:
            while done < n:
                now = time.time_ns() // 1_000_000
                lease = uuid.uuid4().hex
                cur.execute(
                    "UPDATE raw_jobs SET state = 'running', attempt = attempt + 1, "
                    "lease_id = %s, lease_expires_at_ms = %s, worker_id = 'limits', "
                    "attempted_at_ms = %s WHERE id = (SELECT id FROM raw_jobs WHERE "
                    "queue = %s AND partition_key = %s AND state = 'available' "
                    "ORDER BY priority DESC, rowid LIMIT 1 FOR UPDATE SKIP LOCKED) "
                    "RETURNING id", (lease, now + 60_000, now, QUEUE, partition), prepare=True)
                got = cur.fetchone()
                conn.commit()
                if got is None:
                    raise RuntimeError(f"claim found nothing with {n - done} left")
                cur.execute(
                    "UPDATE raw_jobs SET state = 'completed', finalized_at_ms = %s, "
                    "lease_id = NULL, lease_expires_at_ms = NULL WHERE id = %s "
                    "AND lease_id = %s", (now, got[0], lease), prepare=True)
                conn.commit()
                if cur.rowcount != 1:
                    raise RuntimeError("ack lost its lease")
                done += 1

    def wal_meter(self) -> PgWalMeter:
        return PgWalMeter(self.url)

    def close(self) -> None:
        pass


# -- runs ---------------------------------------------------------------------------------

Loop = Callable[[Any, int, int], None]


def timed_insert(raw: Any, n: int, batch: int) -> None:
    raw.insert_commit(range(n))


def timed_batch(raw: Any, n: int, batch: int) -> None:
    raw.batch_insert(range(n), batch)


def timed_claim_ack(raw: Any, n: int, batch: int) -> None:
    raw.claim_ack(n)


LOOPS: dict[str, tuple[Loop, bool]] = {  # name -> (loop, needs rows waiting)
    "insert_commit": (timed_insert, False),
    "batch_insert": (timed_batch, False),
    "claim_ack": (timed_claim_ack, True),
}


def one_run(raw: Any, name: str, n: int, batch: int, wal: str | None) -> dict[str, Any]:
    """One fresh-storage run of a loop: jobs/s, and WAL bytes if `wal` is 'meter'."""
    loop, needs_rows = LOOPS[name]
    with raw.fresh():
        raw.insert_commit(range(-20, 0))  # warm-up: connection, statement, caches
        if needs_rows:
            raw.batch_insert(range(n), batch)
        meter = raw.wal_meter() if wal else None
        if meter is not None:
            meter.start()
        t0 = time.perf_counter()
        loop(raw, n, batch)
        dt = time.perf_counter() - t0
        out: dict[str, Any] = {"jobs_per_s": n / dt}
        if meter is not None:
            w = meter.stop()
            out["wal"] = w
            out["wal_bytes_per_job"] = w["wal_bytes"] / n
            close = getattr(meter, "close", None)
            if close:
                close()
        return out


def agg(values: list[float], nd: int = 1) -> dict[str, Any]:
    return {"median": round(statistics.median(values), nd), "min": round(min(values), nd),
            "max": round(max(values), nd), "runs": [round(v, nd) for v in values]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--store", choices=("sqlite", "pg"), default="sqlite")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--loops", default=",".join(LOOPS), help="comma list of " + ", ".join(LOOPS))
    ap.add_argument("--pg-url", default=None,
                    help="server for --store pg (default: HG_PG, HG_TEST_PG, the harness's)")
    ap.add_argument("--wal", action="store_true", help="also WAL bytes per job")
    args = ap.parse_args(argv)
    if args.store == "sqlite":
        raw: Any = SqliteRaw()
    else:
        url = (args.pg_url or os.environ.get("HG_PG") or os.environ.get("HG_TEST_PG")
               or "postgresql://postgres@127.0.0.1:5439/postgres")
        raw = PgRaw(url)
    try:
        info = raw.describe()
        for name in [x.strip() for x in args.loops.split(",") if x.strip()]:
            if name not in LOOPS:
                ap.error(f"unknown loop {name}")
            # PostgreSQL's LSN delta costs nothing, so the timed runs carry it; SQLite's
            # pinned WAL could change the timing, so its WAL run is a separate one.
            runs = [one_run(raw, name, args.n, args.batch,
                            "meter" if args.wal and raw.kind == "pg" else None)
                    for _ in range(args.runs)]
            line: dict[str, Any] = {
                "bench": "limits", "store": raw.kind, "loop": name, "n": args.n,
                "batch": args.batch if name != "insert_commit" else 1, "runs": args.runs,
                "unit": "jobs/s", **agg([r["jobs_per_s"] for r in runs], 0)}
            if args.wal:
                wal_runs = runs if raw.kind == "pg" else [
                    one_run(raw, name, args.n, args.batch, "meter")]
                line["wal_bytes_per_job"] = agg([r["wal_bytes_per_job"] for r in wal_runs])
                line["wal_detail"] = wal_runs[-1]["wal"]
            line["setup"] = info
            print(json.dumps(line), flush=True)
    finally:
        raw.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
