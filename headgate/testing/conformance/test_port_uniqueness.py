"""Unique keys at the port: lifecycle keys held until the holder is terminal,
window keys released by the store clock, kind namespaces, replace bits and debounce,
and the pruning of expired window keys."""

from __future__ import annotations

import time

import pytest

from headgate import (
    Backpressure,
    Client,
    Duplicate,
    Envelope,
    InvalidInput,
    Outcome,
    Quarantined,
    State,
    Store,
)

from .helpers import finish_job, job_count, stored_job

Q = "default"




# -- uniqueness -----------------------------------------------------------------------

def test_lifecycle_uniqueness_until_the_holder_is_terminal(store: Store,
                                                           client: Client) -> None:
    holder = client.enqueue("report", b"1", unique_key=b"daily")
    with pytest.raises(Duplicate) as info:
        client.enqueue("report", b"2", unique_key=b"daily")
    assert info.value.existing_id == holder and info.value.replaced is False
    assert job_count(store) == 1
    (claim,) = store.admit("w", [Q], capacity=1)
    with pytest.raises(Duplicate):  # running is still live
        client.enqueue("report", b"3", unique_key=b"daily")
    store.ack(claim, Outcome.RETRY, error="x", delay_ms=0)
    assert stored_job(store, holder).state is State.RETRYABLE
    with pytest.raises(Duplicate):  # retryable is still live
        client.enqueue("report", b"4", unique_key=b"daily")
    (claim,) = store.admit("w", [Q], capacity=1)
    store.ack(claim, Outcome.SKIP, error="give up")  # archived: terminal, the key is released
    second = client.enqueue("report", b"5", unique_key=b"daily")
    assert second != holder and job_count(store) == 2


def test_lifecycle_key_released_by_completion_deletion_and_cancel(store: Store,
                                                              client: Client) -> None:
    first = client.enqueue("k", b"1", unique_key=b"u", retention_ms=0)
    finish_job(store, first)  # retention 0: the row is deleted
    assert store.get_job(first) is None
    second = client.enqueue("k", b"2", unique_key=b"u")
    finish_job(store, second)
    assert stored_job(store, second).state is State.COMPLETED
    third = client.enqueue("k", b"3", unique_key=b"u")
    store.operator_cancel(third)
    fourth = client.enqueue("k", b"4", unique_key=b"u")
    assert len({first, second, third, fourth}) == 4


def test_throttle_window_is_released_by_the_clock(store: Store, client: Client) -> None:
    first = client.enqueue("ping", b"1", unique_key=b"host-a", unique_window_ms=300)
    finish_job(store, first)  # terminal, but the window still holds
    with pytest.raises(Duplicate) as info:
        client.enqueue("ping", b"2", unique_key=b"host-a", unique_window_ms=300)
    assert info.value.existing_id == first
    until = stored_job(store, first).enqueued_at_ms + 300
    while store.now_ms() < until:
        time.sleep(0.02)
    second = client.enqueue("ping", b"3", unique_key=b"host-a", unique_window_ms=300)
    assert second != first
    with pytest.raises(Duplicate) as again:
        client.enqueue("ping", b"4", unique_key=b"host-a", unique_window_ms=300)
    assert again.value.existing_id == second


def test_unique_keys_are_namespaced_by_kind(store: Store, client: Client) -> None:
    a = client.enqueue("kind.a", b"", unique_key=b"same")
    b = client.enqueue("kind.b", b"", unique_key=b"same")
    assert a != b and job_count(store) == 2


def test_unique_exclude_kind_shares_the_key_across_kinds(store: Store,
                                                         client: Client) -> None:
    a = client.enqueue("kind.a", b"", unique_key=b"global", unique_exclude_kind=True)
    with pytest.raises(Duplicate) as info:
        client.enqueue("kind.b", b"", unique_key=b"global", unique_exclude_kind=True)
    assert info.value.existing_id == a
    # an excluded key and a kind-namespaced key of the same bytes do not collide
    client.enqueue("kind.a", b"", unique_key=b"global")
    assert job_count(store) == 2


def test_duplicate_within_one_batch_writes_nothing(store: Store, client: Client) -> None:
    # Not a Duplicate: that would name an "existing" job the rollback never stored.
    with pytest.raises(InvalidInput, match="same unique key twice"):
        client.enqueue_many([Envelope(kind="k", payload=b"1", unique_key=b"u"),
                             Envelope(kind="k", payload=b"2", unique_key=b"u")])
    assert job_count(store) == 0


def test_replace_bit_1_payload(store: Store, client: Client) -> None:
    holder = client.enqueue("k", b"old", unique_key=b"u", headers={"v": "1"})
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"new", unique_key=b"u", unique_replace=1, headers={"v": "2"},
                       priority=9)
    assert info.value.existing_id == holder and info.value.replaced is True
    job = stored_job(store, holder, payload=True)
    assert job.payload == b"new" and job.headers == {"v": "2"}
    assert job.priority == 0  # bit 4 was not set
    assert job_count(store) == 1


def test_replace_bit_2_scheduled_at(store: Store, client: Client) -> None:
    now = store.now_ms()
    holder = client.enqueue("k", b"p", unique_key=b"u", scheduled_at_ms=now + 60_000)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"p", unique_key=b"u", unique_replace=2,
                       scheduled_at_ms=now + 120_000)
    assert info.value.replaced is True
    job = stored_job(store, holder)
    assert job.scheduled_at_ms == now + 120_000 and job.state is State.SCHEDULED


def test_replace_bit_4_priority(store: Store, client: Client) -> None:
    holder = client.enqueue("k", b"old", unique_key=b"u", priority=1)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"new", unique_key=b"u", unique_replace=4, priority=7)
    assert info.value.replaced is True
    job = stored_job(store, holder, payload=True)
    assert job.priority == 7 and job.payload == b"old"  # bit 1 was not set


def test_replace_bit_8_max_attempts(store: Store, client: Client) -> None:
    holder = client.enqueue("k", b"p", unique_key=b"u", max_attempts=3)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"p", unique_key=b"u", unique_replace=8, max_attempts=11)
    assert info.value.replaced is True
    assert stored_job(store, holder).max_attempts == 11


def test_replace_all_bits_at_once(store: Store, client: Client) -> None:
    now = store.now_ms()
    holder = client.enqueue("k", b"old", unique_key=b"u", scheduled_at_ms=now + 60_000)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"new", unique_key=b"u", unique_replace=15,
                       scheduled_at_ms=now + 90_000, priority=5, max_attempts=2)
    assert info.value.replaced is True
    job = stored_job(store, holder, payload=True)
    assert (job.payload, job.scheduled_at_ms, job.priority, job.max_attempts) == (
        b"new", now + 90_000, 5, 2)


def retryable_holder(store: Store, client: Client) -> tuple[str, int]:
    """A unique-key holder waiting out a retry delay; returns (id, its due time)."""
    holder = client.enqueue("k", b"old", unique_key=b"u")
    (claim,) = store.admit("w", [Q], capacity=1)
    store.ack(claim, Outcome.RETRY, "flaky", delay_ms=1_000)
    job = stored_job(store, holder)
    assert job.state is State.RETRYABLE
    return holder, job.scheduled_at_ms


def test_debounce_pushes_the_due_time_of_a_retryable_holder(store: Store,
                                                            client: Client) -> None:
    holder, due = retryable_holder(store, client)
    before = store.now_ms()
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"new", unique_key=b"u", unique_debounce_ms=5_000)
    assert info.value.replaced is True
    job = stored_job(store, holder, payload=True)
    assert job.payload == b"new" and job.state is State.RETRYABLE
    assert job.scheduled_at_ms >= before + 5_000 > due


def test_replace_bit_2_moves_a_retryable_holder(store: Store, client: Client) -> None:
    holder, _ = retryable_holder(store, client)
    later = store.now_ms() + 60_000
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"old", unique_key=b"u", unique_replace=2, scheduled_at_ms=later)
    assert info.value.replaced is True
    job = stored_job(store, holder)
    assert (job.state, job.scheduled_at_ms) == (State.RETRYABLE, later)


def test_replace_leaves_a_running_holder_alone(store: Store, client: Client) -> None:
    holder = client.enqueue("k", b"old", unique_key=b"u", priority=1)
    store.admit("w", [Q], capacity=1)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"new", unique_key=b"u", unique_replace=15, priority=9)
    assert info.value.existing_id == holder and info.value.replaced is False
    job = stored_job(store, holder, payload=True)
    assert (job.payload, job.priority, job.state) == (b"old", 1, State.RUNNING)


def test_debounce_pushes_due_time_and_replaces_payload_and_tags(store: Store,
                                                                client: Client) -> None:
    first_at = store.now_ms()
    holder = client.enqueue("sync", b"v1", unique_key=b"user-1", unique_debounce_ms=400,
                            tags=["first"])
    job = stored_job(store, holder)
    assert job.state is State.SCHEDULED
    assert job.scheduled_at_ms >= first_at + 400
    time.sleep(0.05)
    second_at = store.now_ms()
    with pytest.raises(Duplicate) as info:
        client.enqueue("sync", b"v2", unique_key=b"user-1", unique_debounce_ms=400,
                       tags=["second"])
    assert info.value.existing_id == holder and info.value.replaced is True
    job = stored_job(store, holder, payload=True)
    assert job.payload == b"v2" and job.tags == ("second",)
    assert job.scheduled_at_ms >= second_at + 400 > first_at + 400
    assert job.state is State.SCHEDULED and job_count(store) == 1
    assert store.admit("w", [Q], capacity=1) == []  # trailing edge: not yet
    while store.now_ms() < job.scheduled_at_ms:
        time.sleep(0.02)
    (claim,) = store.admit("w", [Q], capacity=1)
    assert claim.job.id == holder and claim.job.payload == b"v2"


# -- the order of an enqueue's decisions (both engines decide the same first) ----------

def test_a_batch_refused_for_a_held_key_leaves_its_holder_as_it_was(
    store: Store, client: Client
) -> None:
    holder = client.enqueue("k", b"old", unique_key=b"u", priority=1)
    with pytest.raises(Duplicate) as info:
        client.enqueue_many([Envelope(kind="k", payload=b"new", unique_key=b"u",
                                      unique_replace=1 | 4, priority=9),
                             Envelope(kind="k", payload=b"other")])
    assert info.value.existing_id == holder and info.value.replaced is False
    job = stored_job(store, holder, payload=True)
    assert (job.payload, job.priority) == (b"old", 1)
    assert job_count(store) == 1


def test_the_first_envelope_of_a_batch_that_is_refused_decides_how(
    store: Store, client: Client
) -> None:
    holder = client.enqueue("k", b"p", unique_key=b"held")
    with pytest.raises(Duplicate) as info:  # a held key before a repeated one
        client.enqueue_many([Envelope(kind="k", unique_key=b"held"),
                             Envelope(kind="k", unique_key=b"twice"),
                             Envelope(kind="k", unique_key=b"twice")])
    assert info.value.existing_id == holder
    with pytest.raises(InvalidInput, match="same unique key twice"):  # and after one
        client.enqueue_many([Envelope(kind="k", unique_key=b"twice"),
                             Envelope(kind="k", unique_key=b"twice"),
                             Envelope(kind="k", unique_key=b"held")])
    assert job_count(store) == 1
    # Neither refused batch claimed "twice".
    client.enqueue("k", b"now", unique_key=b"twice")


def test_a_quarantined_fingerprint_is_refused_before_its_key_is_looked_at(
    store: Store, client: Client, quarantine
) -> None:
    quarantine(store, "poison", b"pill")
    with pytest.raises(Quarantined):
        client.enqueue("poison", b"pill", unique_key=b"u")
    # The refused enqueue claimed nothing: the key is free for other content.
    client.enqueue("poison", b"fine", unique_key=b"u")


def test_a_held_key_is_answered_before_backpressure(store: Store, client: Client) -> None:
    """A duplicate adds no job, so a full queue still answers with its holder."""
    holder = client.enqueue("k", b"p", unique_key=b"u")
    store.set_enqueue_limit(Q, 1)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"again", unique_key=b"u")
    assert info.value.existing_id == holder
    with pytest.raises(Backpressure):
        client.enqueue("k", b"other", unique_key=b"v")
    assert job_count(store) == 1


def test_a_window_key_of_a_batch_expires_by_the_clock(store: Store, client: Client) -> None:
    first, _ = client.enqueue_many([Envelope(kind="k", unique_key=b"w", unique_window_ms=1000),
                                    Envelope(kind="k", payload=b"plain")])
    finish_job(store, first)
    with pytest.raises(Duplicate):  # held by its window, though its job finished
        client.enqueue("k", b"again", unique_key=b"w", unique_window_ms=1000)
    deadline = time.monotonic() + 5
    while True:
        try:
            client.enqueue("k", b"later", unique_key=b"w", unique_window_ms=1000)
            break
        except Duplicate:
            assert time.monotonic() < deadline, "the window never ended"
            time.sleep(0.03)
    assert job_count(store) == 3
