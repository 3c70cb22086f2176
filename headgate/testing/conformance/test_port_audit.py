"""The audit log at the port: append stamped with the store's clock, pages newest first
by a keyset cursor, filters by action, target and start time, bounded pruning."""

from __future__ import annotations

import time

import pytest

from headgate import Store
from headgate.core import InvalidInput


def wait_until(store: Store, at_ms: int) -> None:
    while store.now_ms() < at_ms:
        time.sleep(0.01)


def test_record_returns_the_stored_entry_stamped_by_the_store(store: Store) -> None:
    before = store.now_ms()
    entry = store.record_audit("alice", "job.retry", "job:j1", status=204,
                               detail={"state": "cancelled", "n": 1})
    assert entry.id > 0
    assert before <= entry.at_ms <= store.now_ms()
    assert (entry.actor, entry.action, entry.target, entry.status, entry.outcome,
            entry.detail) == ("alice", "job.retry", "job:j1", 204, "ok",
                              {"state": "cancelled", "n": 1})
    assert store.list_audit() == [entry]


def test_pages_newest_first_with_a_cursor_and_filters(store: Store) -> None:
    ids = []
    for i in range(5):
        action = "job.retry" if i % 2 == 0 else "rate_class.upsert"
        target = f"job:j{i}" if i % 2 == 0 else "rate_class:smtp"
        ids.append(store.record_audit("bob", action, target).id)
    assert ids == sorted(ids) and len(set(ids)) == 5
    first = store.list_audit(limit=2)
    assert [e.id for e in first] == [ids[4], ids[3]]
    second = store.list_audit(limit=2, cursor=first[-1].id)
    assert [e.id for e in second] == [ids[2], ids[1]]
    third = store.list_audit(limit=2, cursor=second[-1].id)
    assert [e.id for e in third] == [ids[0]]
    assert [e.id for e in store.list_audit(action="job.retry")] == [ids[4], ids[2], ids[0]]
    assert [e.id for e in store.list_audit(target="rate_class:smtp")] == [ids[3], ids[1]]
    assert [e.id for e in store.list_audit(action="job.retry", target="job:j2")] == [ids[2]]
    assert store.list_audit(action="nothing") == []
    assert [e.id for e in store.list_audit(target_prefix="rate_class:")] == [ids[3], ids[1]]
    assert [e.id for e in store.list_audit(target_prefix="job:", limit=2)] == [ids[4], ids[2]]
    assert store.list_audit(target_prefix="rate_class:x") == []
    # A prefix is text, never a pattern.
    store.record_audit("bob", "queue.pause", "queue:a%b")
    assert store.list_audit(target_prefix="queue:a%") != []
    assert store.list_audit(target_prefix="queue:_") == []


def test_since_keeps_entries_at_or_after_the_time(store: Store) -> None:
    old = store.record_audit("carol", "queue.pause", "queue:emails")
    wait_until(store, old.at_ms + 5)
    cut = store.now_ms()
    new = store.record_audit("carol", "queue.resume", "queue:emails")
    assert [e.id for e in store.list_audit(since_ms=cut)] == [new.id]
    assert [e.id for e in store.list_audit(since_ms=0)] == [new.id, old.id]


def test_prune_deletes_the_oldest_in_bounded_batches(store: Store) -> None:
    old = [store.record_audit("dave", "job.cancel", f"job:{i}").id for i in range(3)]
    # Seconds apart, so a loaded machine's pauses between the calls below cannot age
    # the newest entry past the cut as well.
    wait_until(store, store.now_ms() + 2_000)
    kept = store.record_audit("dave", "job.cancel", "job:new")
    assert store.prune_audit(3_600_000) == 0  # nothing an hour old
    assert store.prune_audit(1_000, limit=2) == 2
    assert store.prune_audit(1_000, limit=2) == 1
    assert store.prune_audit(1_000) == 0
    remaining = store.list_audit()
    assert [e.id for e in remaining] == [kept.id]
    assert old[0] not in {e.id for e in remaining}


def test_bad_arguments_are_typed_errors_and_store_nothing(store: Store) -> None:
    with pytest.raises(InvalidInput):
        store.record_audit("", "job.retry", "job:x")
    with pytest.raises(InvalidInput):
        store.record_audit("eve", "job.retry", "job:\x00")
    with pytest.raises(InvalidInput):
        store.record_audit("eve", "job.retry", "job:x", detail={"x": object()})
    with pytest.raises(InvalidInput):
        store.record_audit("eve", "job.retry", "job:x", detail={"x": "y" * 70_000})
    with pytest.raises(InvalidInput):
        store.record_audit("eve", "job.retry", "job:x", status=42)
    with pytest.raises(InvalidInput):
        store.list_audit(limit=0)
    with pytest.raises(InvalidInput):
        store.list_audit(target="a\x00b")
    with pytest.raises(InvalidInput):
        store.prune_audit(-1)
    assert store.list_audit() == []
