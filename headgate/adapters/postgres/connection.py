"""PostgreSQL connections: a bounded psycopg pool, the database clock, migrations.

`PgConnection` gives the shared SQL modules the same call shape as sqlite3 (`execute`
returning a cursor, `executemany`, `?` placeholders), so the lifecycle and inspection
are one implementation evaluated on two engines. Admission is not: on PostgreSQL it is
the server-side function of headgate/db/postgres/functions/admit.sql (see admission.py
beside this module), one round trip per call.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg.adapt import AdaptersMap
from psycopg.pq import TransactionStatus
from psycopg.types.array import ListBinaryDumper

from headgate.adapters.migrations import function_files, has_statements, migrations
from headgate.adapters.migrations import known_versions as migration_versions
from headgate.adapters.shared.conn import Cursor
from headgate.adapters.shared.queries import load
from headgate.core import InvalidInput, StoreUnavailable
from headgate.core.clock import wall_ms

from .dialect import POSTGRES
from .outage import Reachability, connection_lost, first_line, unavailable

log = logging.getLogger("headgate.postgres")

MIGRATION_LOCK = 0x6865616467617465  # "headgate"
# How often a call waiting for a pooled connection asks whether the server is known down.
CHECKOUT_SLICE_S = 0.5

Q = load(__name__)
CLOCK = Q["clock"]
TAKE_MIGRATION_LOCK = Q["migration_lock"]
CREATE_MIGRATION_LEDGER = Q["create_migration_ledger"]
APPLIED_VERSIONS = Q["applied_versions"]
RECORD_MIGRATION = Q["record_migration"]
CREATE_FUNCTION_LEDGER = Q["create_function_ledger"]
APPLIED_FUNCTION_FILES = Q["applied_function_files"]
RECORD_FUNCTION_FILE = Q["record_function_file"]
FUNCTION_LEDGER_EXISTS = Q["function_ledger_exists"]
MIGRATION_LEDGER_EXISTS = Q["migration_ledger_exists"]


# The adaptation context of headgate's own connections: Python lists go as binary
# arrays. psycopg's text array dumper escapes element by element in Python (1,000
# fingerprints: ~3.2 ms against ~0.3 binary; the ten ids of an admit's acks: ~20 µs
# against ~7), and every array parameter here is cast or compared to a typed column.
ADAPTERS = AdaptersMap(psycopg.adapters)
ADAPTERS.register_dumper(list, ListBinaryDumper)


class _MostRecentFirst(deque):
    """The pool's idle connections as a stack: psycopg_pool queues them (`append` on
    return, `popleft` on checkout), so a single caller cycles through every idle
    connection and each statement lands on the backend that has idled longest, whose
    caches have gone cold (~150 µs more per enqueue with two connections on this
    machine). Returning to the front hands the warmest backend out first. (The pool's
    idle shrinking also takes from the front, so it closes a warm connection rather
    than a cold one: at most one per `max_idle`, and harmless.)"""

    def append(self, conn: Any) -> None:
        self.appendleft(conn)


@lru_cache(maxsize=2048)
def translate(sql: str) -> str:
    """sqlite3's `?` placeholders to psycopg's `%s` (and literal % escaped)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PgConnection:
    dialect = POSTGRES

    def __init__(self, raw: psycopg.Connection) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        cur = self.raw.cursor()
        cur.execute(translate(sql), tuple(params))
        return cur

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> Cursor:
        cur = self.raw.cursor()
        cur.executemany(translate(sql), rows)
        return cur


RETRYABLE = (
    psycopg.OperationalError,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
    psycopg.errors.LockNotAvailable,
    psycopg.errors.QueryCanceled,
    psycopg.errors.IntegrityError,
    psycopg_pool.PoolTimeout,
)


T = TypeVar("T")

# How many times a transaction PostgreSQL rolled back to break a deadlock runs in all
# before its caller hears StoreUnavailable.
DEADLOCK_ATTEMPTS = 3
# Before a deadlock victim's next attempt: time for the other side to take the rows.
DEADLOCK_PAUSE_S = 0.02


def again_after_deadlock(call: Callable[[], T]) -> T:
    """Run ``call``, one whole transaction, again when PostgreSQL chose it as a
    deadlock's victim: nothing of it happened, and the other transaction has gone on,
    so running it again is what its caller asked for (a worker's turn would otherwise
    fail with StoreUnavailable and back off). It waits a moment first: a row lock freed
    by the rollback is not queued for the transaction that waited on it, and an
    immediate retry could take it back and close the same cycle again."""
    for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
        try:
            return call()
        except StoreUnavailable as exc:
            if attempt == DEADLOCK_ATTEMPTS or not isinstance(
                    exc.__cause__, psycopg.errors.DeadlockDetected):
                raise
            log.info("deadlock victim; running the transaction again (%d)", attempt)
            time.sleep(DEADLOCK_PAUSE_S * attempt * (1 + random.random()))
    raise AssertionError("unreachable")


def store_time(conn: PgConnection) -> int:
    """The store clock read on `conn`, inside its transaction."""
    return int(conn.execute(CLOCK).fetchone()[0])


class PgDatabase:
    def __init__(
        self, url: str, *, min_size: int = 1, max_size: int = 8,
        statement_timeout_ms: int = 30_000, pool_timeout_s: float = 10.0,
    ) -> None:
        self.url = url
        self.pool_timeout_s = pool_timeout_s
        self.reachability = Reachability(url)
        options = f"-c statement_timeout={int(statement_timeout_ms)} -c lock_timeout=10000"
        self.pool = psycopg_pool.ConnectionPool(
            url, min_size=min_size, max_size=max_size, open=False, timeout=pool_timeout_s,
            kwargs={"autocommit": False, "options": options, "connect_timeout": 5,
                    "context": ADAPTERS},
            reconnect_timeout=0, name="headgate",
        )
        # psycopg_pool (pinned) keeps its idle connections in `_pool`; see _MostRecentFirst.
        self.pool._pool = _MostRecentFirst(self.pool._pool)
        try:
            self.pool.open(wait=False)
        except psycopg.Error as exc:  # pragma: no cover - open(wait=False) rarely raises
            raise unavailable(exc) from exc

    @contextmanager
    def _raw(self) -> Iterator[psycopg.Connection]:
        # No per-checkout ping (a round trip on every call): a failure instead makes
        # the pool test its idle connections, so after a server restart only the
        # call that found out fails; while the server stays down, calls fail at once
        # (see outage.py) instead of each waiting out the pool's timeout.
        self.reachability.before_call()
        try:
            raw = self._checkout()
            try:
                with raw:  # commit, or roll back on an error (the pool's own way)
                    yield raw
            finally:
                self.pool.putconn(raw)
        except psycopg.DataError as exc:
            # A value the database cannot hold or compare (NUL in text, a number out of
            # range): the caller's input, not an outage — and never a bare driver error.
            raise InvalidInput(f"invalid value: {first_line(exc)}") from exc
        except RETRYABLE as exc:
            if connection_lost(exc):
                try:
                    self.pool.check()
                except psycopg.Error:
                    pass
                self.reachability.call_failed()
            raise unavailable(exc) from exc

    def _checkout(self) -> psycopg.Connection:
        """A pooled connection, waited for in slices: a call that started waiting just
        before the server went away (the pool's connections discarded, its reconnects
        failing) fails as soon as another call has found the server down, instead of
        waiting out the pool's whole timeout for a connection that cannot come."""
        deadline = time.monotonic() + self.pool_timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise psycopg_pool.PoolTimeout(
                    f"couldn't get a connection after {self.pool_timeout_s:.2f} sec")
            try:
                return self.pool.getconn(timeout=min(CHECKOUT_SLICE_S, left))
            except psycopg_pool.PoolTimeout:
                self.reachability.before_call()

    @contextmanager
    def write(self) -> Iterator[tuple[PgConnection, int]]:
        """One transaction on a pooled connection, with the database's clock."""
        with self._raw() as raw:
            conn = PgConnection(raw)
            yield conn, store_time(conn)

    @contextmanager
    def transaction(self) -> Iterator[PgConnection]:
        """One transaction without the clock round trip, for calls that take the time
        on the server themselves (one round trip in all)."""
        with self._raw() as raw:
            yield PgConnection(raw)


    @contextmanager
    def autocommit(self) -> Iterator[PgConnection]:
        """One statement that is its own transaction: no BEGIN and no COMMIT round trip,
        so a server-side function call costs one round trip in all. The pool's
        connections are transactional: the setting goes back before the connection
        is returned, or the connection is closed so the pool replaces it."""
        with self._raw() as raw:
            raw.autocommit = True
            try:
                yield PgConnection(raw)
            finally:
                if not raw.closed and raw.info.transaction_status == TransactionStatus.IDLE:
                    raw.autocommit = False
                else:
                    raw.close()

    @contextmanager
    def read(self) -> Iterator[PgConnection]:
        """Reads in autocommit. Under READ COMMITTED each statement takes its own
        snapshot even inside a transaction, so BEGIN and COMMIT would only add two
        round trips to every inspection call."""
        with self.autocommit() as conn:
            yield conn

    @contextmanager
    def read_with_clock(self) -> Iterator[tuple[PgConnection, int]]:
        """A read and the database's clock on the same connection: the clock asked for
        on a second pooled connection, while holding the first, let as many concurrent
        readers as pooled connections all wait for one more until the pool's timeout."""
        with self.read() as conn:
            yield conn, store_time(conn)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self.read() as conn:
            return conn.execute(sql, params).fetchall()

    def now_ms(self) -> int:
        return int(self.query(CLOCK)[0][0])

    def migrate(self) -> int:
        """Apply the numbered migrations this database has not recorded, then each
        function file whose text it has not applied (headgate/db/README.md), in one
        transaction under an advisory lock so processes starting together do not race."""
        with self._raw() as raw:
            raw.execute(TAKE_MIGRATION_LOCK, (MIGRATION_LOCK,))
            raw.execute(CREATE_MIGRATION_LEDGER)
            done = {r[0] for r in raw.execute(APPLIED_VERSIONS)}
            for migration in migrations("postgres"):
                version = migration.version
                if version in done:
                    continue
                if has_statements(migration.sql):
                    raw.execute(migration.sql.encode())
                raw.execute(RECORD_MIGRATION, (version, migration.name, wall_ms()))
            raw.execute(CREATE_FUNCTION_LEDGER)
            applied = dict(raw.execute(APPLIED_FUNCTION_FILES).fetchall())
            for file in function_files("postgres"):
                if applied.get(file.name) == file.digest:
                    continue
                raw.execute(file.sql.encode())
                raw.execute(RECORD_FUNCTION_FILE, (file.name, file.digest, wall_ms()))
        return self.version()

    def stale_functions(self) -> list[str]:
        """Function files whose current text this database has not applied: code
        calling them would fail or run an older decision, so a store opened without
        migrating refuses (as it does a schema behind the code)."""
        with self.read() as conn:
            if conn.execute(FUNCTION_LEDGER_EXISTS).fetchone()[0] is None:
                applied: dict[str, str] = {}
            else:
                applied = dict(conn.execute(APPLIED_FUNCTION_FILES).fetchall())
        return [f.name for f in function_files("postgres") if applied.get(f.name) != f.digest]

    def version(self) -> int:
        return max(self.applied_versions(), default=0)

    def applied_versions(self) -> set[int]:
        """The migrations recorded in this database; empty when the runner never touched
        it (so opening without migrating can say what is missing)."""
        with self.read() as conn:
            if conn.execute(MIGRATION_LEDGER_EXISTS).fetchone()[0] is None:
                return set()
            return {int(r[0]) for r in conn.execute(APPLIED_VERSIONS)}

    def close(self) -> None:
        self.pool.close()


def known_versions() -> set[int]:
    """The migration numbers this code ships."""
    return migration_versions("postgres")
