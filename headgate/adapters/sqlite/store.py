"""SqliteStore: the embedded adapter (one file, one box, nothing else to run)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from headgate.adapters.shared import adaptive
from headgate.adapters.shared.admission_limits import validate_admit_args
from headgate.adapters.shared.enqueue_rows import EnqueueResult
from headgate.adapters.shared.store import SqlStore
from headgate.core import (
    AckRequest,
    Claim,
    Envelope,
    Explanation,
    InvalidInput,
    StoreUnavailable,
)
from headgate.core.envelope import check_int
from headgate.core.records import TransactionHorizon
from headgate.store.activity import ActivityHub
from headgate.store.capabilities import Capabilities

from . import admission, enqueue
from .checkpoint import WAL_SIZE_LIMIT
from .combining import WriteCombiner
from .connection import Database

# Said with a missing directory, the usual result of one slash too few or too many.
SQLITE_URL_RULE = ("sqlite:///relative/path.db, three slashes, is relative to the working "
                   "directory; sqlite:////absolute/path.db, four, is an absolute path")

T = TypeVar("T")

class SqliteStore(SqlStore):
    backend = "sqlite"

    def __init__(self, path: str, *, migrate: bool = True, busy_timeout_ms: int = 5_000,
                 crash_limit: int = 3, wal_limit_bytes: int = WAL_SIZE_LIMIT) -> None:
        if path != ":memory:":
            # A missing directory is a typo in the path, not a request for a new tree:
            # refused before SQLite creates anything (a file in an existing one is made).
            parent = Path(path).parent
            if not parent.is_dir():
                where = "" if parent.is_absolute() else f" in {os.getcwd()!r}"
                raise StoreUnavailable(
                    f"store unavailable: directory {str(parent)!r} does not exist{where} "
                    f"({SQLITE_URL_RULE})")
        self.path = path
        self.db = Database(path, busy_timeout_ms, wal_limit_bytes)
        self.combiner = WriteCombiner(self.db)
        self.activity = ActivityHub()
        self.crash_limit = crash_limit
        if migrate:
            self.db.migrate()

    # -- SQLite's statement of the enqueue and admission policies ----------------------
    def _enqueue(self, conn: Any, now: int,
                 envs: Sequence[Envelope]) -> EnqueueResult:
        """The enqueue policy in the current write transaction: SQLite's statement of
        it (PostgreSQL's store runs its function instead)."""
        return enqueue.enqueue(conn, now, envs)

    def admit(self, worker_id: str, queues: Sequence[str], capacity: int,
              lease_ms: int = 30_000, quantum: int | None = None) -> list[Claim]:
        validate_admit_args(worker_id, queues, capacity, lease_ms, quantum)
        with self.db.write() as (conn, now):
            return admission.admit(conn, now, worker_id, queues, capacity, lease_ms, quantum)

    def explain_admission(self, job_id: str) -> Explanation | None:
        with self.db.read_with_clock() as (conn, now):
            explanation = admission.explain(conn, now, job_id)
            if explanation is not None:
                adaptive.annotate(conn, explanation, job_id)
            return explanation

    def ack_and_admit(
        self, acks: Sequence[AckRequest], worker_id: str, queues: Sequence[str],
        capacity: int, lease_ms: int = 30_000, quantum: int | None = None,
    ) -> tuple[list[str], list[Claim]]:
        """ack_many then admit in ONE transaction: a busy worker's steady state (finish
        a few, take a few) costs one commit instead of two."""
        validate_admit_args(worker_id, queues, capacity, lease_ms, quantum)
        with self.db.write() as (conn, now):
            # Every queue this transaction touches, locked up front in one sorted pass.
            conn.dialect.lock_queues(conn, sorted({a.claim.job.queue for a in acks} | set(queues)))
            lost, wake = self._apply_acks(conn, now, acks)
            claims = admission.admit(conn, now, worker_id, queues, capacity, lease_ms, quantum)
        self._publish(wake)
        return lost, claims

    def settle_partitions(self, limit: int = 1000) -> int:
        """The partial index reads the count itself (no flag to clear): settling drops
        idle partitions' rows instead."""
        check_int("limit", limit, 1)
        with self.db.write() as (conn, _):
            return admission.drop_idle_partitions(conn, limit)

    def roll_counters(self, wait_ms: int = 100) -> bool:
        check_int("wait_ms", wait_ms, 1)
        return False  # an update leaves no version behind: nothing to roll

    def write_combined(self, action: Callable[[Any, int], T]) -> T:
        """Group commit (combining.py): the action shares its transaction with those of
        concurrent callers that queued for the writer meanwhile."""
        return self.combiner.run(action)

    def enqueue_many_in(self, conn: sqlite3.Connection,
                        envelopes: Sequence[Envelope]) -> list[str]:
        """Enqueue inside a write transaction this store opened (idempotent_write's
        `conn`): committed with it or not at all. The caller wakes in-process waiters
        after its commit; other processes see the commit itself."""
        if conn is not self.db.connection() or not conn.in_transaction:
            raise InvalidInput("conn= must be a write transaction of this SQLite store")
        envs = [e if e.fingerprint and e.id else e.validated() for e in envelopes]
        if not envs:
            return []
        result = self._enqueue(conn, self.now_ms(), envs)
        if result.duplicate is not None:
            raise result.duplicate
        return result.ids

    def capabilities(self) -> Capabilities:
        return Capabilities(change_token=True, enqueue_many_in=True)

    def store_url(self) -> str:
        return f"sqlite:///{self.path}"

    def change_token(self) -> object:
        """A value that changes when anything may have been committed (other processes
        included): what idle workers and live views check between polls."""
        if self.path == ":memory:":
            return 0  # one connection's private database: nothing else commits to it
        return self.db.data_version()

    def now_ms(self) -> int:
        """The process clock, read by whoever holds the write lock: one order for all."""
        return self.db.now_ms()

    def transaction_horizon(self) -> TransactionHorizon:
        """The WAL file's size on disk (what any process's long reader makes grow) and
        the oldest transaction of this process's own connections (connection.py)."""
        return TransactionHorizon(
            "sqlite", wal_bytes=self.db.checkpointer.wal_bytes(),
            wal_limit_bytes=self.db.wal_limit,
            oldest_transaction_ms=self.db.oldest_transaction_ms(), transactions_seen="process")
