"""WAL volume meters shared by bench/wal.py and bench/limits.py.

SQLite (`SqliteWalMeter`): the bytes appended to `<db>-wal`. A WAL file only grows until
a checkpoint lets the next writer start it over from the beginning, so growth alone
undercounts whenever headgate's Checkpointer thread (adapters/sqlite/checkpoint.py) or
the automatic checkpoint runs. The meter therefore *pins* the WAL for the measurement:
it checkpoints the file to zero (TRUNCATE), then holds a read transaction open on its
own connection. While that snapshot is open no checkpoint can copy frames past it into
the database, so the WAL is never restarted and every frame any process commits stays
in the file: growth = frames × (page_size + 24) + the 32-byte header. Checkpoints are
still attempted (and do nothing), so the writers run headgate's own code unchanged; how
many frames a commit writes does not depend on checkpoints, only on the pages it
changed. Frames are reported beside bytes (`frames = bytes // (page_size + 24)`).

PostgreSQL (`PgWalMeter`): `pg_wal_lsn_diff(pg_current_wal_lsn(), start)`. The WAL is
the whole cluster's, so anything else writing on that server (another benchmark,
autovacuum, a checkpoint's full-page images afterwards) is counted too: measure on a
quiet server. Where the `pg_walinspect` extension can be created (PostgreSQL >= 15,
superuser), the same LSN range is also broken down by resource manager (Heap, Btree,
Transaction, ...) with record and full-page-image bytes.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

FRAME_HEADER = 24
WAL_HEADER = 32


class SqliteWalMeter:
    """Bytes every process appends to the WAL of the SQLite file `path` between
    `start()` and `stop()` (checkpoints held off by a pinned read snapshot)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.wal = path + "-wal"
        self._reader: sqlite3.Connection | None = None
        self._start = 0
        self.page_size = 0

    def _size(self) -> int:
        try:
            return os.path.getsize(self.wal)
        except FileNotFoundError:
            return 0

    def start(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 30000")
        self.page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise RuntimeError(f"{self.path}: could not empty the WAL (a writer is active)")
        conn.execute("BEGIN")
        # A read snapshot taken now; sqlite_master always exists.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        self._reader = conn
        self._start = self._size()

    def stop(self) -> dict[str, Any]:
        grown = self._size() - self._start
        if self._reader is not None:
            self._reader.execute("COMMIT")
            self._reader.close()
            self._reader = None
        return {"wal_bytes": grown,
                "wal_frames": max(0, grown - WAL_HEADER) // (self.page_size + FRAME_HEADER),
                "page_size": self.page_size}


class PgWalMeter:
    """WAL bytes the cluster of `url` wrote between `start()` and `stop()`."""

    def __init__(self, url: str) -> None:
        import psycopg

        self._conn = psycopg.connect(url, autocommit=True)
        self._inspect = False
        try:
            self._conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            self._inspect = True
        except psycopg.Error:
            self._inspect = False
        self._lsn: str | None = None

    def _now(self) -> str:
        # The write position: every commit before this call is at or below it (and
        # flushed, with synchronous_commit=on), which pg_walinspect needs to read it.
        row = self._conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])

    def start(self) -> None:
        self._lsn = self._now()

    def stop(self, by_rmgr: bool = True) -> dict[str, Any]:
        assert self._lsn is not None, "start() first"
        end = self._now()
        row = self._conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint",
                                 (end, self._lsn)).fetchone()
        assert row is not None
        out: dict[str, Any] = {"wal_bytes": int(row[0]), "lsn": [self._lsn, end]}
        if by_rmgr and self._inspect:
            out["by_rmgr"] = self._rmgr(self._lsn, end)
        return out

    def _rmgr(self, start: str, end: str) -> dict[str, Any] | None:
        import psycopg

        try:
            rows = self._conn.execute(
                "SELECT \"resource_manager/record_type\", count, record_size, fpi_size, "
                "combined_size "
                "FROM pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn) WHERE count > 0 "
                "ORDER BY combined_size DESC", (start, end)).fetchall()
        except psycopg.Error as exc:
            return {"error": str(exc).splitlines()[0]}
        return {r[0]: {"records": r[1], "record_bytes": r[2], "fpi_bytes": r[3],
                       "bytes": r[4]} for r in rows}

    def close(self) -> None:
        self._conn.close()
