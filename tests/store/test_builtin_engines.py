"""What the two built-in engines promise beyond the port, and what their shared code does
inside it; the port's own behaviour is the conformance suite (test_conformance.py).

Each test runs on both engines (the `store_url` fixture of tests/conftest.py) and
expects of each what it offers: its schema version, its capabilities, the caller's
asyncio transaction (PostgreSQL) or its refusal (SQLite), `watch_finished` waking or
saying poll; the `payload:` search's scan bound (adapters/shared/job_pages.py) and the
Idempotency-Key purge (adapters/shared/idempotency.py)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable

import pytest

from headgate import Client, Duplicate, Envelope, JobFilter, Outcome, Store, open_store
from headgate.adapters.migrations import migrations
from headgate.adapters.shared import idempotency, job_pages
from headgate.core import InvalidInput
from headgate.core.job_search import parse_search
from headgate.store import Capabilities
from headgate.testing.conformance.test_port_console_views import search


def test_a_fresh_store_is_at_the_latest_migration(store: Store, backend: str) -> None:
    engine = "sqlite" if backend == "sqlite" else "postgres"
    assert store.schema_version() == max(m.version for m in migrations(engine))


def test_capabilities_name_what_the_engine_offers(store: Store, backend: str) -> None:
    caps = store.capabilities()
    assert "inspect" in caps.names
    assert ("transactional" in caps.names) is (backend == "pg")


def test_capabilities_are_typed_and_say_what_the_store_does(
        store: Store, backend: str, open_more: Callable[[], Store]) -> None:
    """Each flag is a promise a caller acts on instead of probing the store's class."""
    caps = store.capabilities()
    assert caps == Capabilities(transactional=backend == "pg", notifying=backend == "pg",
                                inspect=True, change_token=backend == "sqlite",
                                enqueue_many_in=True)
    other = open_more()
    if caps.change_token:
        token = store.change_token()
        other.enqueue_many([Envelope(kind="k", payload=b"p", queue="token")])
        assert store.change_token() != token  # another store's commit moves it
    else:
        assert store.change_token() is None  # the port's default: no token
    # store_url() opens the same database again.
    job_id = other.enqueue_many([Envelope(kind="k", payload=b"p", queue="again")])[0]
    url = store.store_url()
    assert url is not None
    again = open_store(url)
    try:
        assert again.get_job(job_id) is not None
    finally:
        again.close()


def test_an_async_enqueue_in_the_callers_transaction_commits_with_it(
    store: Store, store_url: str, backend: str
) -> None:
    if backend == "sqlite":  # no async driver: the caller's connection is refused
        with pytest.raises(InvalidInput, match="conn="):
            asyncio.run(store.enqueue_many_async([Envelope(kind="k")], conn=object()))
        assert sum(store.counts().values()) == 0
        return
    import psycopg  # only the PostgreSQL branch needs the driver

    async def produce(commit: bool, key: bytes | None = None) -> str:
        conn = await psycopg.AsyncConnection.connect(store_url)
        try:
            async with conn.transaction(force_rollback=not commit):
                (job_id,) = await store.enqueue_many_async(
                    [Envelope(kind="k", payload=b"commit" if commit else b"rollback",
                              unique_key=key)],
                    conn=conn)
        finally:
            await conn.close()
        return job_id

    rolled_back = asyncio.run(produce(False))
    committed = asyncio.run(produce(True))
    assert store.get_job(rolled_back) is None
    assert store.get_job(committed) is not None
    # A unique key too: its claim rolls back with the caller's transaction, and a
    # committed one holds the key against the next enqueue.
    assert store.get_job(asyncio.run(produce(False, b"u"))) is None
    holder = asyncio.run(produce(True, b"u"))
    assert store.get_job(holder) is not None
    with pytest.raises(Duplicate) as dup:
        asyncio.run(produce(True, b"u"))
    assert dup.value.existing_id == holder


def test_watch_finished_wakes_on_the_end_of_a_result_job_or_says_poll(
    store: Store, backend: str
) -> None:
    (job_id,) = store.enqueue_many([Envelope(kind="k", headers={"headgate-result": "1"})])
    woke = threading.Event()
    stop = store.watch_finished(job_id, woke.set)
    if backend == "sqlite":
        assert stop is None  # no cross-process signal: the caller polls
        return
    assert stop is not None
    try:
        (claim,) = store.admit("w", ["default"], capacity=1)
        assert not woke.wait(0.2)  # running is not finished
        store.ack(claim, Outcome.SUCCESS, result=b"r")
        assert woke.wait(10)
    finally:
        stop()



def test_payload_search_pages_and_stops_at_its_scan_bound(
        store: Store, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = []
    for i in range(30):
        payload = json.dumps({"i": i, "hit": i % 3 == 0}).encode()
        job_id = client.enqueue("k", payload, queue="scan")
        if i % 3 == 0:
            wanted.append(job_id)
    newest_first = sorted(wanted, reverse=True)
    assert search(store, "payload.hit:true", limit=4) == newest_first

    # Bounded: each page examines at most SCAN_LIMIT jobs and says so; its cursor goes
    # on from the last job it examined, so following cursors still finds every match.
    monkeypatch.setattr(job_pages, "SCAN_LIMIT", 5)
    monkeypatch.setattr(job_pages, "SCAN_CHUNK", 2)
    f = JobFilter()
    parse_search("payload.hit:true", f)
    page = store.list_jobs(f, limit=50)
    assert page.scan_limited and page.next_cursor is not None
    assert len(page.jobs) <= 2
    assert search(store, "payload.hit:true", limit=50) == newest_first
    # include_payload still returns the payloads of the matches.
    page = store.list_jobs(f, limit=50, include_payload=True)
    assert all(json.loads(j.payload or b"")["hit"] for j in page.jobs)



def _pages(store: Store, f: JobFilter, limit: int) -> list[tuple[list[str], bool]]:
    """Every page of `f`, following cursors: (ids, scan_limited) each."""
    pages, cursor = [], None
    while True:
        page = store.list_jobs(f, cursor=cursor, limit=limit)
        pages.append(([j.id for j in page.jobs], page.scan_limited))
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


def test_a_filter_its_index_answers_in_part_walks_a_bounded_stretch_a_page(
        store: Store, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition key has no index: alone its page walks every job newest first,
    within a queue or a kind it walks their index. Each page looks at SCAN_LIMIT jobs
    at most there (in each of a queue's states) and says so; following its cursors finds
    every match, in order. A filter its index answers whole is not bounded."""
    ids = [client.enqueue("k", b"", queue="walk", partition_key="rare" if i % 10 == 0
                          else f"p{i}") for i in range(30)]
    rare = [ids[20], ids[10], ids[0]]
    assert len(store.admit("w", ["walk"], 5)) == 5  # two states in the queue
    monkeypatch.setattr(job_pages, "SCAN_LIMIT", 7)

    first = store.list_jobs(JobFilter(partition_key="rare"), limit=5)
    assert first.jobs == [] and first.scan_limited and first.next_cursor is not None
    for f in (JobFilter(partition_key="rare"), JobFilter(queue="walk", partition_key="rare"),
              JobFilter(kind="k", partition_key="rare"),
              JobFilter(queue="walk", state="available", partition_key="rare")):
        pages = _pages(store, f, 5)
        expected = [i for i in rare if f.state is None
                    or store.get_job(i).state.value == f.state]  # type: ignore[union-attr]
        assert [i for page, _ in pages for i in page] == expected, f
        assert pages[0][1], f  # the first page stopped at its bound

    # The queue's own index answers it whole: one page, no bound.
    page = store.list_jobs(JobFilter(queue="walk"), limit=50)
    assert [j.id for j in page.jobs] == ids[::-1] and not page.scan_limited

    # Every job matching: each page fills within its stretch, none is scan-limited.
    pages = _pages(store, JobFilter(kind="k", priority=0), 7)
    assert [i for page, _ in pages for i in page] == ids[::-1]
    assert [len(page) for page, _ in pages] == [7, 7, 7, 7, 2]
    assert not any(limited for _, limited in pages)


def test_expired_idempotency_keys_are_purged_as_keys_are_claimed(store: Store) -> None:
    """Not on every claim (that is a statement in every write), but often enough that
    the table holds about what has not expired."""
    for i in range(5):
        assert store.idempotency_begin(f"old{i}", "h", ttl_ms=1) is None
    now = store.now_ms()
    while store.now_ms() <= now + 2:
        time.sleep(0.005)
    for i in range(idempotency.PURGE_EVERY):
        assert store.idempotency_begin(f"new{i}", "h") is None
    with store.db.read() as conn:  # type: ignore[attr-defined]
        keys = {r[0] for r in conn.execute("SELECT scope_key FROM api_idempotency")}
    assert keys == {f"new{i}" for i in range(idempotency.PURGE_EVERY)}
