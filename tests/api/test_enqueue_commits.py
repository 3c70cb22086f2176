"""POST /api/v1/jobs costs one write transaction: the Idempotency-Key's record, the job
and the stored answer commit together. Counted by the engines
themselves: SQLite's commit frames in the WAL (held from checkpointing by a read
snapshot), PostgreSQL's transaction ids (a write transaction takes one, a read none)."""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import psycopg
import pytest

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]
# Transaction ids are cluster-wide: another process's writes would count as this test's.
pytestmark = pytest.mark.serial

REQUESTS = 5


def _sqlite_commits(path: str) -> Iterator[Callable[[], int]]:
    pin = sqlite3.connect(path, isolation_level=None)
    pin.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pin.execute("BEGIN")
    pin.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot pins the WAL

    def commits() -> int:
        with open(path + "-wal", "rb") as f:
            data = f.read()
        if len(data) < 32:
            return 0
        page = struct.unpack(">I", data[8:12])[0]
        n, off = 0, 32
        while off + 24 <= len(data):
            n += struct.unpack(">I", data[off + 4 : off + 8])[0] != 0  # a commit frame
            off += 24 + page
        return n

    try:
        yield commits
    finally:
        pin.execute("COMMIT")
        pin.close()


def _pg_commits(url: str) -> Iterator[Callable[[], int]]:
    with psycopg.connect(url, autocommit=True) as conn:
        first = int(conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0])
        reads = [0]

        def commits() -> int:
            reads[0] += 1  # each reading takes an id itself
            now = int(conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0])
            return now - first - reads[0]

        yield commits


@pytest.fixture
def write_transactions(api: Api, store_url: str) -> Iterator[Callable[[], int]]:
    if api.store.backend == "sqlite":
        yield from _sqlite_commits(api.store.path)  # type: ignore[attr-defined]
    else:
        yield from _pg_commits(store_url)


def test_enqueue_over_http_is_one_write_transaction(
        api: Api, write_transactions: Callable[[], int]) -> None:
    api.enqueue("warm.up")  # the queue's first job may take extra steps
    before = write_transactions()
    ids = {api.enqueue("mail.send", b'{"n": %d}' % i) for i in range(REQUESTS)}
    assert write_transactions() - before == REQUESTS
    assert len(ids) == REQUESTS
    assert api.store.counts()["available"] == REQUESTS + 1

