"""A long-held snapshot, and what headgate shows and repairs after it: SQLite's WAL file
returns under its limit once the reader leaves (adapters/sqlite/checkpoint.py), and the
oldest open transaction, the WAL size and PostgreSQL's xmin age reach /metrics and the
console's Cluster page (Store.transaction_horizon). Real SQLite files, the real
PostgreSQL server, real HTTP."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_helpers import Api, Servers
from support import wait_for

from headgate import Client, Envelope, Store, open_store
from headgate.adapters.sqlite.store import SqliteStore
from headgate.core.job import AckRequest
from headgate.dashboard import views

LIMIT = 256 * 1024  # bytes: a small limit, so a few hundred jobs go past it


def gauge(api: Api, name: str) -> float | None:
    """One unlabelled gauge from /metrics over HTTP; None when it is not exported."""
    text = api.get("/metrics").text
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return None if match is None else float(match.group(1))


def work(store: Store, jobs: int) -> int:
    """Enqueue and complete `jobs` jobs through the port, up to 100 at a time."""
    client = Client(store)
    batch = min(jobs, 100)
    for _ in range(jobs // batch):
        client.enqueue_many([Envelope(kind="k", payload=b"%d" % i) for i in range(batch)])
        claims = store.admit("w-1", ["default"], batch)
        assert len(claims) == batch
        assert store.ack_many([AckRequest(c, "success") for c in claims]) == []
    return jobs


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteStore]:
    """A SQLite store with a small WAL limit whose checkpoints only the test runs: the
    background thread never wakes and this thread's connection never checkpoints on
    its own."""
    store = SqliteStore(str(tmp_path / "hg.db"), wal_limit_bytes=LIMIT)
    store.db.checkpointer.every_changes = 10**12
    store.db.connection().execute("PRAGMA wal_autocheckpoint = 0")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def serve() -> Iterator[Servers]:
    servers = Servers("unused: every test passes its own store")
    try:
        yield servers
    finally:
        servers.stop_all()


def test_after_a_long_reader_leaves_the_wal_file_returns_under_its_limit(
    sqlite_store: SqliteStore, serve: Servers
) -> None:
    store = sqlite_store
    wal = store.path + "-wal"
    api = serve.start(store=store)
    Client(store).enqueue("k", b"before the reader")
    reader = sqlite3.connect(store.path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM jobs").fetchone() == (1,)
    try:
        completed = 0
        while os.path.getsize(wal) <= 4 * LIMIT:
            completed += work(store, 200)
            assert completed < 10_000, "the WAL did not grow past four times its limit"
        held = store.db.checkpointer.run_once()
        # The reader's snapshot keeps frames in the WAL: nothing may be cut.
        assert held.blocked and not held.truncated and held.wal_bytes > 4 * LIMIT
        assert reader.execute("SELECT count(*) FROM jobs").fetchone() == (1,)
        assert gauge(api, "headgate_store_wal_bytes") == os.path.getsize(wal)
    finally:
        reader.execute("COMMIT")
        reader.close()
    for _ in range(3):
        if store.db.checkpointer.run_once().wal_bytes <= LIMIT:
            break
    assert os.path.getsize(wal) <= LIMIT
    assert store.db.checkpointer.truncations >= 1
    wal_gauge = gauge(api, "headgate_store_wal_bytes")
    assert wal_gauge is not None and wal_gauge <= LIMIT
    # Nothing was lost by the cut, and the store keeps writing after it.
    completed += work(store, 100)
    other = open_store(f"sqlite:///{store.path}", migrate=False)
    try:
        counts = other.counts("default")
    finally:
        other.close()
    assert (counts["completed"], counts["available"]) == (completed, 1)


def test_a_wal_under_its_limit_is_never_truncated(sqlite_store: SqliteStore) -> None:
    """TRUNCATE holds the write lock: a WAL of normal size only gets PASSIVE rounds."""
    other = sqlite3.connect(sqlite_store.path, isolation_level=None)
    try:  # the migration's frames out of the way
        assert other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        other.close()
    work(sqlite_store, 20)
    size = os.path.getsize(sqlite_store.path + "-wal")
    assert 0 < size <= LIMIT
    done = sqlite_store.db.checkpointer.run_once()
    assert not done.blocked and not done.truncated
    assert sqlite_store.db.checkpointer.truncations == 0
    assert os.path.getsize(sqlite_store.path + "-wal") == size


def test_a_writer_that_starts_the_wal_over_cuts_it_to_the_journal_size_limit(
    sqlite_store: SqliteStore,
) -> None:
    """Without any TRUNCATE: a complete checkpoint by anyone, then the next commit
    (journal_size_limit, set on every store connection)."""
    store = sqlite_store
    wal = store.path + "-wal"
    assert store.db.connection().execute("PRAGMA journal_size_limit").fetchone() == (LIMIT,)
    reader = sqlite3.connect(store.path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM jobs").fetchone()
    while os.path.getsize(wal) <= 2 * LIMIT:
        work(store, 200)
    reader.execute("COMMIT")
    reader.close()
    other = sqlite3.connect(store.path, isolation_level=None)  # not headgate's
    try:
        busy, frames, copied = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        other.close()
    assert busy == 0 and frames == copied > 0
    assert os.path.getsize(wal) > 2 * LIMIT  # a checkpoint alone leaves the file
    Client(store).enqueue("k", b"starts the WAL over")
    assert os.path.getsize(wal) <= LIMIT
    assert store.db.checkpointer.truncations == 0


def test_a_read_transaction_of_the_server_process_is_its_oldest_transaction(
    sqlite_store: SqliteStore, serve: Servers
) -> None:
    store = sqlite_store
    api = serve.start(store=store)
    assert gauge(api, "headgate_store_oldest_transaction_seconds") == 0
    with store.db.read() as conn:
        conn.execute("SELECT count(*) FROM jobs").fetchone()
        held = wait_for(lambda: gauge(api, "headgate_store_oldest_transaction_seconds"), 10,
                        "the open read transaction in /metrics")
        assert held > 0
        assert store.transaction_horizon().transactions_seen == "process"
    assert gauge(api, "headgate_store_oldest_transaction_seconds") == 0
    assert gauge(api, "headgate_store_xmin_age_transactions") is None  # PostgreSQL's


def test_the_cluster_page_shows_the_wal_file_and_the_oldest_transaction(
    sqlite_store: SqliteStore, serve: Servers
) -> None:
    api = serve.start(store=sqlite_store)
    work(sqlite_store, 100)
    body = api.get(api.base + "/cluster").text
    assert 'id="store-health"' in body
    # The server's own duties may be mid-transaction at the moment the page is read.
    assert "WAL file" in body and "oldest open transaction" in body
    horizon = api.get("/system/storage").json()["horizon"]
    assert horizon["engine"] == "sqlite" and horizon["transactions_seen"] == "process"
    assert horizon["wal_bytes"] is not None and horizon["wal_limit_bytes"] > 0
    assert "this server&#39;s own connections" in body or "this server's own" in body


# -- PostgreSQL ---------------------------------------------------------------------------

@pytest.fixture
def pg_store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if not os.environ.get("HG_TEST_PG"):
        pytest.skip("needs HG_TEST_PG")
    store = open_store(request.getfixturevalue("pg_url"))
    try:
        yield store
    finally:
        store.close()


def test_a_held_repeatable_read_transaction_shows_in_metrics_and_drops_when_released(
    pg_store: Store, pg_url: str, serve: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    api = serve.start(store=pg_store)
    assert gauge(api, "headgate_store_oldest_transaction_seconds") == 0
    assert gauge(api, "headgate_store_xmin_age_transactions") == 0
    assert gauge(api, "headgate_store_wal_bytes") is None  # SQLite's
    holder = psycopg.connect(pg_url)
    try:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM jobs").fetchone()  # takes the snapshot
        work(pg_store, 200)  # transactions after the snapshot: its xmin ages
        held = wait_for(lambda: gauge(api, "headgate_store_oldest_transaction_seconds"), 10,
                        "the held transaction in /metrics")
        assert held > 0
        xmin_age = gauge(api, "headgate_store_xmin_age_transactions")
        assert xmin_age is not None and xmin_age >= 1
        assert pg_store.transaction_horizon().transactions_seen == "database"
        horizon = api.get("/system/storage").json()["horizon"]
        assert horizon["engine"] == "postgres" and horizon["oldest_transaction_ms"] > 0
        assert horizon["xmin_age"] >= 1 and horizon["wal_bytes"] is None
        # The console flags it once past its threshold (5 minutes; here none).
        monkeypatch.setattr(views, "LONG_TRANSACTION_MS", 0)
        body = api.get(api.base + "/cluster").text
        assert "A transaction has been open for" in body and "vacuum" in body
        assert "transactions since the oldest held snapshot" in body
    finally:
        holder.rollback()
        holder.close()
    wait_for(lambda: gauge(api, "headgate_store_oldest_transaction_seconds") == 0, 10,
             "the released transaction to leave /metrics")
    assert gauge(api, "headgate_store_xmin_age_transactions") == 0
    assert "A transaction has been open for" not in api.get(api.base + "/cluster").text
