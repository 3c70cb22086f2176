"""The port's own housekeeping: ping, the store clock and asyncio enqueue. What each
built-in engine offers beyond it (schema version, capabilities, the caller's asyncio
transaction, the finished-job wake-up) is tests/store/test_builtin_engines.py's."""

from __future__ import annotations

import asyncio
import time

import pytest

from headgate import Duplicate, Envelope, State, Store


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
