"""The worker registry at the port: heartbeats upsert a row, an operator's signal is
delivered once, the reply names the running claims that are no longer the worker's,
listing by recency, removal and ageing out."""

from __future__ import annotations

import time
from typing import Any

import pytest

from headgate import Client, Outcome, Store
from headgate.core import InvalidInput, NotFound
from headgate.core.records import HeartbeatReply, WorkerBeat


def beat(store: Store, worker_id: str, running: Any = (), **fields: Any) -> HeartbeatReply:
    return store.heartbeat(WorkerBeat(worker_id, host="h1", pid=42, queues=("a", "b"),
                                      concurrency=4, **fields), running)


def test_a_heartbeat_registers_the_worker_and_a_later_one_updates_it(store: Store) -> None:
    assert beat(store, "w1") == HeartbeatReply(signal=None, cancelled=())
    (row,) = store.list_workers(60_000)
    assert (row.worker_id, row.host, row.pid, row.queues, row.concurrency) == (
        "w1", "h1", 42, ("a", "b"), 4)
    assert (row.agent, row.kinds) == (None, None)  # a Python worker names neither
    first_beat = row.heartbeat_at_ms
    time.sleep(0.01)
    beat(store, "w1", inflight=3, polls=10, empty_polls=2, status="quiet")
    (row,) = store.list_workers(60_000)
    assert (row.inflight, row.polls, row.empty_polls, row.status) == (3, 10, 2, "quiet")
    assert row.heartbeat_at_ms >= first_beat


def test_a_signal_is_delivered_once_and_can_be_withdrawn(store: Store) -> None:
    beat(store, "w1")
    store.signal_worker("w1", "quiet")
    (row,) = store.list_workers(60_000)
    assert row.pending_signal == "quiet"
    assert beat(store, "w1").signal == "quiet"
    assert beat(store, "w1").signal is None  # delivered: gone
    store.signal_worker("w1", "terminate")
    store.signal_worker("w1", None)  # withdrawn before the next beat
    assert beat(store, "w1").signal is None


def test_a_signal_is_checked(store: Store) -> None:
    beat(store, "w1")
    with pytest.raises(InvalidInput, match="command"):
        store.signal_worker("w1", "explode")
    with pytest.raises(NotFound):
        store.signal_worker("nobody", "quiet")
    with pytest.raises(InvalidInput, match="worker_id"):
        store.heartbeat(WorkerBeat(""))


def test_the_reply_names_claims_cancelled_or_moved_on(store: Store) -> None:
    client = Client(store)
    keep, cancel, done = (client.enqueue("k", b"%d" % i) for i in range(3))
    claims = {c.job.id: c for c in store.admit("w1", ["default"], capacity=3)}
    store.operator_cancel(cancel)
    store.ack(claims[done], Outcome.SUCCESS)
    reply = beat(store, "w1", list(claims.values()))
    assert sorted(c.job.id for c in reply.cancelled) == sorted([cancel, done])
    assert keep not in [c.job.id for c in reply.cancelled]


def test_listing_is_by_recency_and_removal_and_ageing_delete_rows(store: Store) -> None:
    beat(store, "old")
    time.sleep(0.6)
    beat(store, "young")
    assert {w.worker_id for w in store.list_workers(60_000)} == {"old", "young"}
    assert [w.worker_id for w in store.list_workers(300)] == ["young"]
    assert store.forget_workers(300) == 1
    assert [w.worker_id for w in store.list_workers(60_000)] == ["young"]
    store.remove_worker("young")
    store.remove_worker("young")  # already gone: no error
    assert store.list_workers(60_000) == []
    with pytest.raises(InvalidInput):
        store.forget_workers(0)
