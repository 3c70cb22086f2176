"""Producing jobs at the port: identity, all-or-nothing batches, field limits,
quarantine and backpressure. Uniqueness is test_port_uniqueness.py; the Client's own
policy (authorizer, middleware, hooks, plugins, circuit breaker) is
tests/services/test_client_producing.py."""

# mypy: disable-error-code="arg-type"
from __future__ import annotations

from collections.abc import Callable

import pytest

from headgate import (
    Backpressure,
    Client,
    Duplicate,
    Envelope,
    IdConflict,
    InvalidInput,
    Quarantined,
    State,
    Store,
)

from .helpers import finish_job, job_count, stored_job

Q = "default"




# -- identity ------------------------------------------------------------------------

def test_same_id_same_content_is_an_idempotent_replay(store: Store, client: Client) -> None:
    fields = {"id": "order-42", "queue": "mail", "partition_key": "acme", "tags": ["b", "a"],
              "headers": {"x": "1"}, "priority": 3}
    first = client.enqueue("email.send", b"hello", **fields)
    before = stored_job(store, first, payload=True)
    assert first == "order-42"
    replay = client.enqueue("email.send", b"hello", **{**fields, "tags": ["a", "b", "a"]})
    assert replay == "order-42"
    assert job_count(store) == 1 and store.counts("mail")["available"] == 1
    assert stored_job(store, first, payload=True) == before  # no rewrite
    history = store.history("mail", 0, 60_000)
    assert sum(b.arrived for b in history) == 1  # no second arrival


def test_same_id_replays_even_after_the_job_ran(store: Store, client: Client) -> None:
    client.enqueue("k", b"p", id="once")
    finish_job(store, "once")
    assert client.enqueue("k", b"p", id="once") == "once"
    assert stored_job(store, "once").state is State.COMPLETED


@pytest.mark.parametrize(
    "change",
    [{"payload": b"other"}, {"kind": "other.kind"}, {"queue": "q2"}, {"priority": 1},
     {"partition_key": "p"}, {"max_attempts": 3}, {"tags": ["t"]}, {"weight": 2}],
)
def test_same_id_different_content_is_a_conflict(store: Store, client: Client,
                                                 change: dict) -> None:
    base = {"kind": "k", "payload": b"p", "id": "job-1"}
    client.enqueue_many([Envelope(**base)])
    with pytest.raises(IdConflict) as info:
        client.enqueue_many([Envelope(**{**base, **change})])
    assert str(info.value) == "id conflict: job job-1"
    assert info.value.job_id == "job-1"
    assert job_count(store) == 1
    assert stored_job(store, "job-1", payload=True).payload == b"p"


def test_id_conflict_in_a_batch_writes_nothing(store: Store, client: Client) -> None:
    client.enqueue("k", b"p", id="taken")
    with pytest.raises(IdConflict):
        client.enqueue_many([Envelope(kind="k", payload=b"fresh"),
                             Envelope(kind="k", payload=b"changed", id="taken")])
    assert job_count(store) == 1


def test_schema_version_and_max_attempts_fit_32_bits_on_every_backend(client: Client) -> None:
    for field in ("schema_version", "max_attempts"):
        with pytest.raises(InvalidInput, match=f"{field} must be <= 2147483647"):
            client.enqueue("k", b"", **{field: 2**31})
        client.enqueue("k", b"", **{field: 2**31 - 1})



# -- batches --------------------------------------------------------------------------

def test_batch_returns_ids_in_order(store: Store, client: Client) -> None:
    envs = [Envelope(kind="k", payload=f"{i}".encode(), id=f"id-{i}") for i in range(5)]
    assert client.enqueue_many(envs) == [f"id-{i}" for i in range(5)]
    assert job_count(store) == 5


def test_batch_with_one_invalid_member_writes_nothing(store: Store, client: Client) -> None:
    envs = [Envelope(kind="k", payload=b"ok") for _ in range(3)]
    with pytest.raises(InvalidInput, match="weight"):
        client.enqueue_many([*envs, Envelope(kind="k", payload=b"bad", weight=0)])
    assert job_count(store) == 0
    with pytest.raises(InvalidInput):
        store.enqueue_many([*envs, Envelope(kind="", payload=b"bad")])
    assert job_count(store) == 0


def test_batch_with_one_duplicate_writes_nothing(store: Store, client: Client) -> None:
    holder = client.enqueue("k", b"p", unique_key=b"u")
    with pytest.raises(Duplicate) as info:
        client.enqueue_many([Envelope(kind="k", payload=b"1"),
                             Envelope(kind="k", payload=b"2", unique_key=b"u"),
                             Envelope(kind="k", payload=b"3", unique_key=b"fresh")])
    assert info.value.existing_id == holder
    assert job_count(store) == 1
    # the batch's other key was not taken either
    client.enqueue("k", b"4", unique_key=b"fresh")


def test_batch_with_the_same_id_twice_is_rejected(store: Store, client: Client) -> None:
    with pytest.raises(InvalidInput):
        client.enqueue_many([Envelope(kind="k", id="x"), Envelope(kind="k", id="x")])
    assert job_count(store) == 0


# -- quarantine and backpressure --------------------------------------------------------

def test_quarantined_fingerprint_is_rejected(
    store: Store, client: Client, quarantine: Callable[[Store, str, bytes], str]
) -> None:
    fp = quarantine(store, "poison", b"pill")
    before = job_count(store)
    with pytest.raises(Quarantined) as info:
        client.enqueue("poison", b"pill")
    assert info.value.fingerprint == fp
    with pytest.raises(Quarantined):
        client.enqueue_many([Envelope(kind="ok", payload=b"x"),
                             Envelope(kind="poison", payload=b"pill")])
    assert job_count(store) == before
    client.enqueue("poison", b"a different pill")  # other content is fine


def test_backpressure_at_the_exact_limit(store: Store, client: Client) -> None:
    store.set_enqueue_limit(Q, 3)
    for i in range(3):
        client.enqueue("k", f"{i}".encode())
    with pytest.raises(Backpressure) as info:
        client.enqueue("k", b"4th")
    err = info.value
    assert (err.queue, err.limit, err.current, err.incoming) == (Q, 3, 3, 1)
    assert job_count(store) == 3
    client.enqueue("k", b"elsewhere", queue="other")  # per queue


def test_backpressure_counts_the_whole_batch(store: Store, client: Client) -> None:
    store.set_enqueue_limit(Q, 3)
    client.enqueue("k", b"1")
    client.enqueue("k", b"2")
    with pytest.raises(Backpressure) as info:
        client.enqueue_many([Envelope(kind="k", payload=b"3"), Envelope(kind="k", payload=b"4")])
    assert (info.value.current, info.value.incoming) == (2, 2)
    assert job_count(store) == 2
    client.enqueue_many([Envelope(kind="k", payload=b"3")])  # exactly at the limit: accepted


def test_backpressure_releases_as_jobs_finish(store: Store, client: Client) -> None:
    store.set_enqueue_limit(Q, 1)
    first = client.enqueue("k", b"1")
    with pytest.raises(Backpressure):
        client.enqueue("k", b"2")
    finish_job(store, first)  # completed is not unfinished
    client.enqueue("k", b"2")
    store.set_enqueue_limit(Q, None)  # no limit
    for i in range(5):
        client.enqueue("k", f"more-{i}".encode())


def test_enqueue_limit_zero_is_a_kill_switch(store: Store, client: Client) -> None:
    store.set_enqueue_limit(Q, 0)
    with pytest.raises(Backpressure) as info:
        client.enqueue("k", b"x")
    assert (info.value.limit, info.value.current, info.value.incoming) == (0, 0, 1)
    assert job_count(store) == 0
    with pytest.raises(InvalidInput):
        store.set_enqueue_limit(Q, -1)
