"""The port's own housekeeping on every engine: schema version, capabilities, ping, the
store clock, asyncio enqueue and the finished-job wake-up."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from headgate import Duplicate, Envelope, Outcome, State, Store, open_store
from headgate.adapters.migrations import migrations
from headgate.core import InvalidInput
from headgate.store import Capabilities


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


def test_ping_answers_and_the_clock_moves_forward(store: Store) -> None:
    assert store.ping() is None
    first = store.now_ms()
    time.sleep(0.02)
    second = store.now_ms()
    assert second > first
    # The store clock is a wall clock in ms: the same machine agrees within a minute.
    assert abs(second - time.time() * 1000) < 60_000


def test_asyncio_enqueue_inserts_and_raises_as_the_sync_one(store: Store) -> None:
    async def produce() -> list[str]:
        return await store.enqueue_many_async(
            [Envelope(kind="k", payload=b"%d" % i, unique_key=b"u%d" % i) for i in range(3)])

    ids = asyncio.run(produce())
    assert [store.get_job(i).state for i in ids] == [State.AVAILABLE] * 3  # type: ignore[union-attr]
    with pytest.raises(Duplicate) as info:
        asyncio.run(store.enqueue_many_async([Envelope(kind="k", unique_key=b"u1")]))
    assert info.value.existing_id == ids[1]
    assert sum(store.counts().values()) == 3


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
