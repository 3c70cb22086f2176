"""Behaviour the hot paths must keep: the folded single-envelope enqueue, set-based acks
and the one-read admission context, against real stores on both engines."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from headgate import Client, Envelope, LeaseLost
from headgate.core import AckRequest, Backpressure, Outcome, State
from headgate.store.port import Store

Q = "fast"


def test_envelope_constructor_defaults_are_the_field_defaults() -> None:
    params = inspect.signature(Envelope.__init__).parameters
    for f in dataclasses.fields(Envelope):
        default = params[f.name].default
        if f.default_factory is not dataclasses.MISSING:
            assert Envelope("k").headers == f.default_factory()
        elif f.default is dataclasses.MISSING:
            assert default is inspect.Parameter.empty, f.name
        else:
            assert default == f.default, f.name
    assert list(params)[1:] == [f.name for f in dataclasses.fields(Envelope)]
    first, second = Envelope("k"), Envelope("k")
    assert first.headers is not second.headers  # a fresh dict each, as default_factory
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.kind = "other"  # type: ignore[misc]
    assert dataclasses.replace(first, queue="q").queue == "q"


def test_single_enqueue_creates_its_queue_and_is_idempotent_by_id(store: Store) -> None:
    client = Client(store)
    job_id = client.enqueue("k", b"x", queue="brand-new")
    assert "brand-new" in {q.queue for q in store.queue_stats()}
    assert client.enqueue("k", b"x", queue="brand-new", id=job_id) == job_id
    assert store.counts("brand-new")["available"] == 1


def test_single_enqueue_reads_the_enqueue_limit_each_time(store: Store) -> None:
    client = Client(store)
    client.enqueue("k", b"1", queue=Q)
    store.set_enqueue_limit(Q, 2)
    client.enqueue("k", b"2", queue=Q)
    with pytest.raises(Backpressure):
        client.enqueue("k", b"3", queue=Q)
    store.set_enqueue_limit(Q, None)
    client.enqueue("k", b"3", queue=Q)
    assert store.counts(Q)["available"] == 3


def test_set_based_acks_report_each_lost_lease_exactly(store: Store) -> None:
    client = Client(store)
    client.enqueue_many([Envelope("k", b"%d" % i, queue=Q) for i in range(6)])
    claims = store.admit("w", [Q], capacity=6)
    assert len(claims) == 6
    stale = claims[0]
    store.release([stale])  # its lease is gone; the job is available again
    acks = [AckRequest(c, Outcome.SUCCESS) for c in claims]
    acks.append(AckRequest(claims[1], Outcome.SUCCESS))  # the same job twice in one batch
    lost, more = store.ack_and_admit(acks, "w", [Q], capacity=1)
    assert sorted(lost) == sorted([stale.job.id, claims[1].job.id])
    assert [c.job.id for c in more] == [stale.job.id]
    assert store.counts(Q)["completed"] == 5
    with pytest.raises(LeaseLost):
        store.ack(claims[2], Outcome.SUCCESS)


def test_set_based_acks_keep_each_outcome(store: Store) -> None:
    client = Client(store)
    client.enqueue_many([Envelope("k", b"%d" % i, queue=Q) for i in range(4)])
    a, b, c, d = store.admit("w", [Q], capacity=4)
    lost = store.ack_many([
        AckRequest(a, Outcome.SUCCESS, result=b"ra"),
        AckRequest(b, Outcome.SUCCESS, result=b"rb"),
        AckRequest(c, Outcome.RETRY, error="boom", delay_ms=60_000),
        AckRequest(d, Outcome.SUCCESS),
    ])
    assert lost == []
    assert store.get_result(a.job.id).bytes == b"ra"  # type: ignore[union-attr]
    assert store.get_result(b.job.id).bytes == b"rb"  # type: ignore[union-attr]
    retried = store.get_job(c.job.id)
    assert retried is not None and retried.state is State.RETRYABLE
    assert retried.errors[-1]["error"] == "boom" and retried.attempt == 1
    done = store.get_job(d.job.id)
    assert done is not None and done.state is State.COMPLETED and done.errors == []
    assert store.counts(Q) == {**store.counts(Q), "completed": 3, "retryable": 1}


def test_a_stale_ack_before_the_live_one_of_the_same_job_loses_alone(store: Store) -> None:
    client = Client(store)
    client.enqueue("k", b"once", queue=Q)
    (old,) = store.admit("w", [Q], capacity=1)
    store.release([old])
    (live,) = store.admit("w", [Q], capacity=1)
    assert live.job.id == old.job.id and live.fence != old.fence
    lost = store.ack_many([AckRequest(old, Outcome.SUCCESS), AckRequest(live, Outcome.SUCCESS)])
    assert lost == [old.job.id]
    assert store.counts(Q)["completed"] == 1
