"""Retention at the port: prune of old terminal jobs (never quarantined ones) and the
pruning of unique keys whose window has passed. evict_retained is in
test_port_lifecycle.py with the other sweeps."""

from __future__ import annotations

import time

import pytest

import headgate
from headgate import Client, Duplicate, Outcome, Store
from headgate.core import InvalidInput


def _complete(store: Store, queue: str) -> None:
    for claim in store.admit("w", [queue], capacity=100):
        store.ack(claim, Outcome.SUCCESS)


def key_counts(store: Store) -> dict[str, int]:
    counts = store.unique_key_counts()
    return {"rows": counts.rows, "expired": counts.expired}


def wait_until(store: Store, at_ms: int) -> None:
    while store.now_ms() < at_ms:
        time.sleep(0.01)


def test_prune_counts_then_deletes_terminal_jobs_but_never_quarantined(
    store: Store, quarantine, all_jobs
) -> None:
    client = Client(store)
    done = [client.enqueue("k", b"%d" % i, queue="q") for i in range(4)]
    _complete(store, "q")
    cancelled = client.enqueue("k", b"c", queue="q2")
    store.operator_cancel(cancelled)
    quarantine(store, "poison", b"x")
    fresh = client.enqueue("k", b"fresh", queue="q3")
    time.sleep(0.05)
    assert store.prune(3_600_000, dry_run=True).total == 0  # nothing that old
    report = store.prune(10, dry_run=True)
    assert report.counts["completed"] == 4
    assert report.counts["cancelled"] == 1
    assert "quarantined" not in report.counts
    assert (report.total, report.deleted, report.dry_run) == (5, 0, True)
    assert all(store.get_job(j) is not None for j in done)
    real = store.prune(10, dry_run=False)
    assert (real.total, real.deleted) == (5, 5)
    states = sorted(j.state.value for j in all_jobs(store))
    assert states == ["available", "quarantined"]
    assert store.get_job(fresh) is not None
    assert store.counts().get("completed", 0) == 0
    with pytest.raises(headgate.core.InvalidInput):
        store.prune(-1, dry_run=True)


def test_prune_uniques_deletes_expired_window_keys_in_bounded_batches(store: Store) -> None:
    client = Client(store)
    for host in (b"a", b"b", b"c"):
        client.enqueue("ping", host, unique_key=host, unique_window_ms=100)
    open_window = client.enqueue("ping", b"o", unique_key=b"open", unique_window_ms=3_600_000)
    lifecycle = client.enqueue("sync", b"l", unique_key=b"user-1")
    _complete(store, "default")  # the lifecycle key's holder is terminal: still kept
    wait_until(store, store.now_ms() + 150)
    assert key_counts(store) == {"rows": 5, "expired": 3}
    assert store.prune_uniques(limit=2) == 2
    assert key_counts(store) == {"rows": 3, "expired": 1}
    assert store.prune_uniques() == 1
    assert store.prune_uniques() == 0
    assert key_counts(store) == {"rows": 2, "expired": 0}
    # The kept keys still mean what they meant; an open window is still a duplicate.
    with pytest.raises(Duplicate) as info:
        client.enqueue("ping", b"o2", unique_key=b"open", unique_window_ms=3_600_000)
    assert info.value.existing_id == open_window
    assert store.get_job(lifecycle) is not None
    assert client.enqueue("sync", b"l2", unique_key=b"user-1") != lifecycle


def test_a_pruned_window_key_is_claimed_afresh_and_holds_again(store: Store) -> None:
    client = Client(store)
    first = client.enqueue("ping", b"1", unique_key=b"h", unique_window_ms=100)
    wait_until(store, store.now_ms() + 150)
    assert store.prune_uniques() == 1
    second = client.enqueue("ping", b"2", unique_key=b"h", unique_window_ms=60_000)
    assert second != first
    assert key_counts(store) == {"rows": 1, "expired": 0}
    assert store.prune_uniques() == 0  # the new window is open: kept
    with pytest.raises(Duplicate) as info:
        client.enqueue("ping", b"3", unique_key=b"h", unique_window_ms=60_000)
    assert info.value.existing_id == second


def test_prune_uniques_rejects_a_limit_below_one(store: Store) -> None:
    with pytest.raises(InvalidInput, match="limit"):
        store.prune_uniques(0)



def test_settling_partitions_never_hides_a_waiting_job(store: Store) -> None:
    """Partitions that emptied lose their waiting flag (an engine that keeps one); the
    partitions still waiting, and one that fills again afterwards, are admitted."""
    client = Client(store)

    def put(key: str, *payloads: bytes) -> None:
        client.enqueue_many([headgate.Envelope(kind="k", payload=p, queue="settle",
                                               partition_key=key) for p in payloads])

    put("a", b"a0", b"a1")
    for claim in store.admit("w", ["settle"], capacity=2):
        store.ack(claim, Outcome.SUCCESS)
    put("b", b"b0", b"b1")
    assert store.settle_partitions(100) >= 0
    assert store.settle_partitions(100) == 0  # nothing left to settle
    assert {c.job.payload for c in store.admit("w", ["settle"], capacity=1)} == {b"b0"}
    put("a", b"a2")
    waiting = {p.partition_key: p.waiting for p in store.partitions("settle")}
    assert (waiting.get("a"), waiting.get("b")) == (1, 1)
    got = {c.job.payload for c in store.admit("w", ["settle"], capacity=10)}
    assert got == {b"a2", b"b1"}
    with pytest.raises(InvalidInput):
        store.settle_partitions(0)


def test_a_new_counter_generation_keeps_every_count(store: Store) -> None:
    """Rolling the counter rows (an engine that keys them by generation) changes no
    count, fairness state or partition, and work after it counts on from there."""
    client = Client(store)

    def snapshot() -> tuple[dict[str, int], list[tuple[str, int, int, int]]]:
        parts = sorted((p.partition_key, p.waiting, p.running, p.deficit)
                       for p in store.partitions("gens"))
        return store.counts("gens"), parts

    client.enqueue_many([headgate.Envelope(kind="k", payload=b"%d" % i, queue="gens",
                                           partition_key="ab"[i % 2]) for i in range(6)])
    claims = store.admit("w", ["gens"], capacity=3)
    store.ack(claims[0], Outcome.SUCCESS)
    before = snapshot()
    rolled = store.roll_counters()
    assert snapshot() == before
    assert rolled == store.roll_counters()  # each roll starts one, or the engine has none
    for claim in claims[1:]:
        store.ack(claim, Outcome.SUCCESS)
    for claim in store.admit("w", ["gens"], capacity=10):
        store.ack(claim, Outcome.SUCCESS)
    assert store.counts("gens").get("completed") == 6
    assert all((p.waiting, p.running) == (0, 0) for p in store.partitions("gens"))
    with pytest.raises(InvalidInput):
        store.roll_counters(0)
