"""What only the PostgreSQL backend promises: transactional enqueue, LISTEN/NOTIFY
wake-ups across processes, a poll-only mode, and surviving a server restart."""

from __future__ import annotations

import os
import time

import psycopg
import pytest
from support import pg_available, pg_ctl

import headgate
from headgate import Client, Outcome, StoreUnavailable, open_store

pytestmark = pytest.mark.skipif(not pg_available(), reason="HG_TEST_PG not set")


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_transactional_enqueue_commits_with_the_caller(pg_url: str) -> None:
    store = open_store(pg_url)
    watcher = open_store(pg_url)  # stands in for a worker in another process
    try:
        heard: list[frozenset[str]] = []
        watcher.activity.subscribe(heard.append)
        assert watcher.listening(5)
        client = Client(store)

        with psycopg.connect(pg_url) as conn:
            job_id = client.enqueue("tx.kind", b"rolled back", queue="txq", conn=conn)
            assert store.get_job(job_id) is None  # not visible before commit
            conn.rollback()
        assert store.get_job(job_id) is None
        time.sleep(0.3)
        assert not any("txq" in q for q in heard), "a rolled back enqueue woke someone"

        with psycopg.connect(pg_url) as conn:
            job_id = client.enqueue("tx.kind", b"committed", queue="txq", conn=conn)
            conn.commit()
        job = store.get_job(job_id)
        assert job is not None and job.state == headgate.State.AVAILABLE
        assert wait_for(lambda: any("txq" in q for q in heard))
    finally:
        watcher.close()
        store.close()


def test_notify_wakes_another_process_store(pg_url: str) -> None:
    producer = open_store(pg_url)
    worker = open_store(pg_url)
    try:
        assert worker.listening(5)
        seq = worker.activity.seq
        started = time.monotonic()
        Client(producer).enqueue("k", b"", queue="wake")
        new_seq = worker.activity.wait(seq, timeout=5)
        assert new_seq != seq
        assert time.monotonic() - started < 5
        claims = worker.admit("w", ["wake"], 10)
        assert [c.job.queue for c in claims] == ["wake"]
    finally:
        worker.close()
        producer.close()


def test_capabilities_and_poll_only_mode(pg_url: str) -> None:
    notifying = open_store(pg_url)
    polling = open_store(pg_url, notify=False)
    try:
        assert notifying.capabilities().names == ("transactional", "notifying", "inspect")
        assert polling.capabilities().names == ("transactional", "inspect")
        assert not polling.listening(0.2)
        # Poll-only still works: enqueue and admit through polling.
        job_id = Client(polling).enqueue("k", b"p", queue="poll")
        claims = polling.admit("w", ["poll"], 5)
        assert [c.job.id for c in claims] == [job_id]
        polling.ack(claims[0], Outcome.SUCCESS)
        assert polling.get_job(job_id).state == headgate.State.COMPLETED
    finally:
        polling.close()
        notifying.close()


def _listen_connections(pg_url: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query = 'LISTEN headgate'"
        ).fetchone()[0]


def test_only_a_store_someone_listens_to_holds_a_listen_connection(pg_url: str) -> None:
    """A producer would only hear its own enqueues: no LISTEN connection until a
    subscriber (a worker, a live view) asks for activity, and then exactly one."""
    producer = open_store(pg_url)
    try:
        Client(producer).enqueue_many(
            [headgate.Envelope(kind="k", payload=b"%d" % i, queue="lazy") for i in range(3)])
        time.sleep(0.3)
        assert _listen_connections(pg_url) == 0
        heard: list[frozenset[str]] = []
        producer.activity.subscribe(heard.append)
        producer.activity.subscribe(heard.append)
        assert producer.listening(5)
        assert _listen_connections(pg_url) == 1
        other = open_store(pg_url)
        try:
            Client(other).enqueue("k", b"", queue="lazy")
        finally:
            other.close()
        assert wait_for(lambda: any("lazy" in q for q in heard))
    finally:
        producer.close()
    assert wait_for(lambda: _listen_connections(pg_url) == 0)


def test_a_lone_caller_keeps_getting_the_warmest_connection(pg_url: str) -> None:
    """With several idle connections in the pool, one caller's statements all land on
    the backend it used last, not on each idle one in turn (whose caches went cold)."""
    store = open_store(pg_url)
    try:
        db = store.db
        with db.read() as first, db.read() as second:  # the pool now holds two
            pids = {first.raw.info.backend_pid, second.raw.info.backend_pid}
        assert len(pids) == 2
        used = []
        for _ in range(6):
            with db.read() as conn:
                used.append(conn.raw.info.backend_pid)
                conn.execute("SELECT 1")
        assert len(set(used)) == 1, used
    finally:
        store.close()


def test_sqlite_has_neither_capability(tmp_path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    try:
        assert "transactional" not in store.capabilities().names
        assert "notifying" not in store.capabilities().names
    finally:
        store.close()


def test_store_clock_is_the_database_clock(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        with psycopg.connect(pg_url) as conn:
            db_now = conn.execute(
                "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint"
            ).fetchone()[0]
        assert abs(store.now_ms() - db_now) < 1000
        Client(store).enqueue("k", b"", queue="clock")
        claim = store.admit("w", ["clock"], 1, lease_ms=60_000)[0]
        assert abs(claim.lease_expires_at_ms - (db_now + 60_000)) < 5_000
    finally:
        store.close()


@pytest.mark.serial  # stops the shared cluster: every other process's PostgreSQL test fails
@pytest.mark.skipif(not os.environ.get("HG_TEST_PG_DATA"), reason="needs the test cluster")
def test_server_restart_is_survived(pg_url: str) -> None:
    store = open_store(pg_url)
    client = Client(store)
    try:
        assert store.listening(5)
        before = client.enqueue_many(
            [headgate.Envelope(kind="k", payload=b"%d" % i, queue="rs") for i in range(20)]
        )
        claims = store.admit("w", ["rs"], 5, lease_ms=60_000)
        pg_ctl("stop", "-m", "fast", "-w")
        try:
            with pytest.raises(StoreUnavailable) as err:
                client.enqueue("k", b"during", queue="rs")
            assert "store unavailable" in str(err.value)
            # Once the server is known down, calls fail at once: without that each
            # would wait out the pool's 10 s timeout for a connection.
            asked = time.monotonic()
            for _ in range(3):
                with pytest.raises(StoreUnavailable):
                    store.ping()
            assert time.monotonic() - asked < 5
        finally:
            pg_ctl("start", "-w", "-l", os.path.join(os.path.dirname(
                os.environ["HG_TEST_PG_DATA"]), "postgres.log"))
        assert wait_for(lambda: _ping(store), timeout=20)
        # The leases taken before the outage are still good; nothing was lost.
        for claim in claims:
            store.ack(claim, Outcome.SUCCESS)
        after = client.enqueue("k", b"after", queue="rs")
        counts = store.counts("rs")
        assert counts["completed"] == 5
        assert counts["available"] == len(before) - 5 + 1
        assert store.get_job(after) is not None
        assert store.listening(10)  # the LISTEN connection came back by itself
    finally:
        store.close()


def _ping(store: headgate.Store) -> bool:
    try:
        store.ping()
        return True
    except StoreUnavailable:
        return False


def test_poll_only_is_chosen_by_environment(pg_url: str) -> None:
    from headgate.services.config import Settings

    settings = Settings.from_env({"HG_STORE": "pg", "HG_PG": pg_url, "HG_PG_POLL_ONLY": "1"})
    store = open_store(settings.store_url(), **settings.store_options())
    try:
        assert "notifying" not in store.capabilities().names
    finally:
        store.close()
    assert Settings.from_env({"HG_STORE": "sqlite"}).store_options() == {}


def test_a_database_at_schema_9_upgrades_with_its_jobs(pg_url: str) -> None:
    """An older database keeps working whatever text of the unversioned functions it
    ran: here headgate_enqueue has other result columns (CREATE OR REPLACE could not
    change those). The current code calls the versioned functions that migrating
    creates, and leaves the old one alone."""
    from headgate.adapters.migrations import has_statements, migrations

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                     "name TEXT NOT NULL, applied_at_ms BIGINT NOT NULL)")
        for migration in migrations("postgres"):
            if migration.version > 9:
                continue
            if has_statements(migration.sql):
                conn.execute(migration.sql.encode())
            conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, 0)",
                         (migration.version, migration.name))
        args = ("TEXT[], TEXT[], INTEGER[], BYTEA[], TEXT[], TEXT[], INTEGER[], TEXT[], "
                "TEXT[], BIGINT[], BIGINT[], INTEGER[], BIGINT[], TEXT[], TEXT[], TEXT[], "
                "TEXT[], BIGINT[], BOOLEAN[], TEXT")
        conn.execute(f"CREATE FUNCTION headgate_enqueue({args}, OUT outcome TEXT, "
                     "OUT subject TEXT, OUT queues TEXT[]) LANGUAGE sql AS "
                     "$$ SELECT 'ok', NULL::text, '{}'::text[] $$")
        conn.execute("INSERT INTO queues (name) VALUES ('up')")
        conn.execute(
            "INSERT INTO jobs (id, kind, schema_version, payload, fingerprint, queue, "
            "priority, partition_key, rate_class, weight, state, scheduled_at_ms, "
            "max_attempts, retention_ms, enqueued_at_ms) VALUES ('job-old', 'k', 1, 'old', "
            "'fp', 'up', 0, '', '', 1, 'available', 0, 3, 60000, 0)")
    store = open_store(pg_url)
    try:
        assert store.schema_version() >= 11
        Client(store).enqueue("k", b"new", queue="up")
        claims = store.admit("w", ["up"], 5)
        assert sorted(c.job.payload for c in claims) == [b"new", b"old"]
        assert store.counts("up")["running"] == 2
    finally:
        store.close()


def test_reads_that_need_the_clock_hold_one_connection(pg_url: str) -> None:
    """The store time is a query of its own on PostgreSQL. A read that asked for it while
    holding its connection needed two at once, so as many concurrent readers as pooled
    connections all waited for a second one until the pool gave up; with one
    connection every such read did."""
    store = open_store(pg_url, notify=False, pool_max=1)
    try:
        Client(store).enqueue("k", b"", queue="q")
        started = time.monotonic()
        assert [q.queue for q in store.queue_stats()] == ["q"]
        assert store.queue_extras()["q"].noisy_partitions == 0
        assert store.list_workers(60_000) == []
        assert store.rate_classes() == []
        assert len(store.list_jobs(headgate.JobFilter(queue="q")).jobs) == 1
        assert store.explain_admission("missing") is None
        assert store.unique_key_counts().orphans is not None
        assert isinstance(store.history_bucket_counts(0), dict)
        assert store.find_schedule_run("missing", "key") is None
        assert time.monotonic() - started < 5  # none waited out the pool's timeout
    finally:
        store.close()


def test_list_parameters_go_as_binary_arrays(pg_url: str) -> None:
    """psycopg's text array dumper escapes each element in Python (a batch's 1,000
    fingerprints cost ~3 ms that way); the store's connections send lists in binary,
    typed by their elements, which also lets the server resolve an uncast array."""
    store = open_store(pg_url, notify=False)
    try:
        with store.db.write() as (conn, _):
            kinds = conn.raw.execute(
                "SELECT pg_typeof(%s)::text, pg_typeof(%s)::text, cardinality(%s)",
                (["a", "b"], [b"x"], ["c"])).fetchone()
        assert kinds == ("text[]", "bytea[]", 1)
        # The user's own psycopg connections keep psycopg's defaults (text arrays,
        # whose type the server infers from the context).
        with psycopg.connect(pg_url) as conn, pytest.raises(psycopg.errors.IndeterminateDatatype):
            conn.execute("SELECT pg_typeof(%s)::text", (["a"],))
    finally:
        store.close()
