"""SQLite connections: one per thread, WAL, IMMEDIATE write transactions, migrations
and the trigger files.

The store clock is read here, inside the write lock, so every decision in a transaction
sees one instant and no two writers disagree about order. ``clock_offset_ms`` moves it
forward for this process only: ``app.testing()``'s ``advance`` uses it on its
throw-away store, so backoffs and delays come due without sleeping.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from headgate.adapters.migrations import (
    FunctionFile,
    migrations,
    sqlite_constants_differ,
    trigger_files,
    write_sqlite_constants,
)
from headgate.adapters.migrations import known_versions as migration_versions
from headgate.adapters.shared.queries import fill, load
from headgate.core import StoreUnavailable
from headgate.core.clock import wall_ms

from .checkpoint import WAL_SIZE_LIMIT, Checkpointer
from .dialect import SQLITE
from .writer_lock import WriterLock

BUSY_TIMEOUT_MS = 5_000

Q = load(__name__)
BUSY_TIMEOUT = Q["busy_timeout"]
SETTINGS = (Q["page_size"], Q["journal_mode"], Q["synchronous"], Q["wal_autocheckpoint"])
JOURNAL_SIZE_LIMIT = Q["journal_size_limit"]
LATE_SETTINGS = (Q["cache_size"], Q["foreign_keys"])
DATA_VERSION = Q["data_version"]
CREATE_MIGRATION_LEDGER = Q["create_migration_ledger"]
MIGRATION_APPLIED = Q["migration_applied"]
RECORD_MIGRATION = Q["record_migration"]
LEDGER_EXISTS = Q["ledger_exists"]
APPLIED_VERSIONS = Q["applied_versions"]
CREATE_TRIGGER_LEDGER = Q["create_trigger_ledger"]
RECORD_TRIGGER_FILE = Q["record_trigger_file"]
TRIGGERS_IN_USE = Q["triggers_in_use"]
TRIGGER_LEDGER_EXISTS = Q["trigger_ledger_exists"]
APPLIED_TRIGGER_FILES = Q["applied_trigger_files"]
DROP_TRIGGER = Q["drop_trigger"]


class SqliteConnection(sqlite3.Connection):
    """sqlite3's connection, tagged with the dialect the shared SQL modules consult."""

    dialect = SQLITE


def unavailable(exc: sqlite3.Error) -> StoreUnavailable:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StoreUnavailable(f"store unavailable: database is locked ({text})")
    return StoreUnavailable(f"store unavailable: {text}")


class Database:
    def __init__(self, path: str, busy_timeout_ms: int = BUSY_TIMEOUT_MS,
                 wal_limit: int = WAL_SIZE_LIMIT) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.wal_limit = wal_limit
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        # Writers queue here rather than in SQLite's busy handler, which polls with
        # sleeps of up to 100 ms (writer_lock.py): this process's threads, then other
        # headgate processes on the same file.
        self._write_lock = WriterLock(None if path == ":memory:" else path,
                                      busy_timeout_ms / 1000)
        self.checkpointer = Checkpointer(
            self._checkpoint_connection, wal_limit=wal_limit, write_lock=self._write_lock,
            wal_path=None if path == ":memory:" else path + "-wal")
        # Monotonic start of each open transaction of this process's store connections,
        # by thread (one connection per thread): SQLite cannot say who holds a snapshot.
        self._open_since: dict[int, float] = {}
        self._probe: sqlite3.Connection | None = None
        self._probe_lock = threading.Lock()
        # Added to the process clock (never negative: the store's order must not reverse).
        self.clock_offset_ms = 0

    def now_ms(self) -> int:
        return wall_ms() + self.clock_offset_ms

    def connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False,
                    timeout=self.busy_timeout_ms / 1000, factory=SqliteConnection,
                )
                # In this order; sql/connection.sql says why each.
                conn.execute(fill(BUSY_TIMEOUT, value=str(int(self.busy_timeout_ms))))
                for setting in SETTINGS:
                    conn.execute(setting)
                conn.execute(fill(JOURNAL_SIZE_LIMIT, value=str(int(self.wal_limit))))
                for setting in LATE_SETTINGS:
                    conn.execute(setting)
            except sqlite3.Error as exc:
                raise unavailable(exc) from exc
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def write(self) -> Iterator[tuple[sqlite3.Connection, int]]:
        """BEGIN IMMEDIATE … COMMIT, yielding the connection and the store clock."""
        conn = self.connection()
        thread = threading.get_ident()
        with self._write_lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise unavailable(exc) from exc
            self._open_since[thread] = time.monotonic()
            changes = conn.total_changes
            try:
                yield conn, self.now_ms()
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError):
                    raise unavailable(exc) from exc
                raise
            finally:
                self._open_since.pop(thread, None)
        self.checkpointer.committed(conn.total_changes - changes)

    def data_version(self) -> int:
        """`PRAGMA data_version` on a private read-only connection: it changes whenever
        another connection commits (this process's writers or another process's), for
        about two microseconds and no lock."""
        try:
            with self._probe_lock:
                if self._probe is None:
                    uri = Path(self.path).expanduser().resolve().as_uri() + "?mode=ro"
                    self._probe = sqlite3.connect(uri, uri=True, check_same_thread=False,
                                                  isolation_level=None)
                    with self._all_lock:
                        self._all.append(self._probe)
                return self._probe.execute(DATA_VERSION).fetchone()[0]
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc

    def _checkpoint_connection(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for multi-statement reads."""
        conn = self.connection()
        thread = threading.get_ident()
        try:
            conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc
        self._open_since[thread] = time.monotonic()
        try:
            yield conn
        except sqlite3.OperationalError as exc:
            raise unavailable(exc) from exc
        finally:
            self._open_since.pop(thread, None)
            if conn.in_transaction:
                conn.execute("COMMIT")

    def oldest_transaction_ms(self) -> int | None:
        """Age of the oldest transaction open on this process's store connections
        (`read`, `write`), None when none is. Other processes' readers are not seen:
        SQLite keeps no record of who reads which snapshot, only the WAL's growth shows
        them (`checkpointer.wal_bytes`)."""
        starts = list(self._open_since.values())
        if not starts:
            return None
        return int((time.monotonic() - min(starts)) * 1000)

    @contextmanager
    def read_with_clock(self) -> Iterator[tuple[sqlite3.Connection, int]]:
        """A read with the store time (the process clock), as PostgreSQL's reads it."""
        with self.read() as conn:
            yield conn, self.now_ms()

    def query(self, sql: str, params: tuple | dict = ()) -> list[tuple]:
        try:
            return self.connection().execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            raise unavailable(exc) from exc

    def migrate(self) -> int:
        """Apply numbered files from headgate/db/sqlite that are newer than the recorded
        version, then the trigger files whose triggers are not the database's, then
        rewrite the constant tables if the Python constants changed."""
        conn = self.connection()
        try:
            conn.execute(CREATE_MIGRATION_LEDGER)
        except sqlite3.Error as exc:  # e.g. a file that is not a database, or read-only
            raise unavailable(exc) from exc
        for migration in migrations("sqlite"):
            version = migration.version
            with self.write() as (wconn, now):
                done = wconn.execute(MIGRATION_APPLIED, (version,)).fetchone()
                if done:
                    continue
                for statement in _split_sql(migration.sql):
                    wconn.execute(statement)
                # Tables a migration just created hold their values before it commits,
                # so no other process's trigger ever reads them empty.
                write_sqlite_constants(wconn)
                wconn.execute(RECORD_MIGRATION, (version, migration.name, now))
        try:
            triggers_stale = bool(stale_trigger_files(conn))
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc
        if triggers_stale:  # all current: a read, no write
            with self.write() as (wconn, now):
                apply_trigger_files(wconn, now)
        try:
            stale = sqlite_constants_differ(conn)
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc
        if stale:  # unchanged constants: a read, no write
            with self.write() as (wconn, _now):
                write_sqlite_constants(wconn)
        return self.version()

    def version(self) -> int:
        return max(self.applied_versions(), default=0)

    def stale_functions(self) -> list[str]:
        """SQLite has no server-side functions (see the PostgreSQL adapter's); its
        triggers and the constant tables they read are the logic it keeps instead, so a
        trigger other than its file's, or values other than this code's, make a store
        opened without migrating refuse, as stale functions do. Triggers are compared by
        their text, not the recorded digest: a database whose triggers are the files'
        runs this code's logic whatever its ledger says."""
        try:
            conn = self.connection()
            triggers = [f.name for f in stale_trigger_files(conn, by_digest=False)]
            stale = sqlite_constants_differ(conn)
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc
        return triggers + (["schema_constants"] if stale else [])

    def applied_versions(self) -> set[int]:
        """The migrations recorded in this file; empty when the runner never touched it
        (so opening without migrating can say what is missing instead of failing on
        the first query)."""
        try:
            conn = self.connection()
            table = conn.execute(LEDGER_EXISTS).fetchone()
            if table is None:
                return set()
            return {int(r[0]) for r in conn.execute(APPLIED_VERSIONS)}
        except sqlite3.Error as exc:
            raise unavailable(exc) from exc

    def close(self) -> None:
        self.checkpointer.close()
        self._write_lock.close()
        with self._all_lock:
            for conn in self._all:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all.clear()
        self._local = threading.local()
        with self._probe_lock:
            self._probe = None


def known_versions() -> set[int]:
    """The migration numbers this code ships."""
    return migration_versions("sqlite")


# A trigger file's statement: leading comments, then `CREATE TRIGGER name …`.
_LEADING_COMMENTS = re.compile(r"\A(?:\s*--[^\n]*\n)*\s*")
_TRIGGER_NAME = re.compile(r"CREATE TRIGGER (\w+)\s")


def trigger_definitions(file: FunctionFile) -> dict[str, str]:
    """Each trigger a trigger file defines, by name, in the text sqlite_master keeps for
    it (the statement from CREATE, without its semicolon), so that what a database runs
    is compared with the file as text."""
    found: dict[str, str] = {}
    for statement in _split_sql(file.sql):
        text = _LEADING_COMMENTS.sub("", statement).removesuffix(";").rstrip()
        match = _TRIGGER_NAME.match(text)
        if match is None or match.group(1) in found:
            raise StoreUnavailable(
                f"store unavailable: trigger file {file.name} holds a statement that is "
                f"not one CREATE TRIGGER of a new name: {text[:60]!r}")
        found[match.group(1)] = text
    return found


def stale_trigger_files(conn: sqlite3.Connection, *,
                        by_digest: bool = True) -> list[FunctionFile]:
    """The trigger files whose triggers this database does not hold exactly (missing:
    dropped with their table, or edited by hand), and with ``by_digest`` also those
    whose text schema_triggers does not record as applied."""
    in_use = dict(conn.execute(TRIGGERS_IN_USE))
    applied: dict[str, str] = {}
    if by_digest and conn.execute(TRIGGER_LEDGER_EXISTS).fetchone():
        applied = dict(conn.execute(APPLIED_TRIGGER_FILES))
    return [
        file for file in trigger_files()
        if (by_digest and applied.get(file.name) != file.digest)
        or any(in_use.get(name) != text for name, text in trigger_definitions(file).items())
    ]


def apply_trigger_files(conn: sqlite3.Connection, now: int) -> None:
    """Drop and recreate the triggers of each stale trigger file and record its digest,
    in the caller's write transaction (so no writer sees a trigger missing, and a
    second process migrating at once finds nothing left to do)."""
    conn.execute(CREATE_TRIGGER_LEDGER)
    for file in stale_trigger_files(conn):
        for name, text in trigger_definitions(file).items():
            conn.execute(fill(DROP_TRIGGER, name=name))
            conn.execute(text)
        conn.execute(RECORD_TRIGGER_FILE, (file.name, file.digest, now))


def _split_sql(text: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    statements: list[str] = []
    buf: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith("--") and not buf:
            continue
        buf.append(line)
        chunk = "\n".join(buf).strip()
        if chunk and sqlite3.complete_statement(chunk):
            statements.append(chunk)
            buf = []
    tail = "\n".join(buf).strip()
    if tail:
        statements.append(tail)
    return statements
