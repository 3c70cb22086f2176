"""Duty leases at the port: one holder per duty on the store's clock, renewal
that never takes a lapsed lease back, stepping down, and the race between stores for a
free lease. The runner built on them is tests/services/test_duties.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from operator import methodcaller

import pytest

from headgate import Store
from headgate.core import InvalidInput


def wait_until(store: Store, at_ms: int) -> None:
    while store.now_ms() < at_ms:
        time.sleep(0.01)


def expiry(store: Store, name: str) -> int:
    (row,) = [d for d in store.duty_holders() if d.name == name]
    return int(row.expires_at_ms)


def test_duty_lease_is_a_singleton_on_store_time(store: Store) -> None:
    assert store.claim_duty("reclaimer", "serve-a", ttl_ms=200)
    assert not store.claim_duty("reclaimer", "serve-b", ttl_ms=200)
    assert store.claim_duty("reclaimer", "serve-a", ttl_ms=200)  # the holder renews
    assert store.claim_duty("promoter", "serve-b", ttl_ms=60_000)  # other duties are separate
    store.release_duty("reclaimer", "serve-b")  # not the holder: no effect
    assert not store.claim_duty("reclaimer", "serve-b", ttl_ms=200)
    holders = {d.name: d for d in store.duty_holders()}
    assert holders["reclaimer"].holder == "serve-a"
    wait_until(store, holders["reclaimer"].expires_at_ms + 1)
    assert store.claim_duty("reclaimer", "serve-b", ttl_ms=60_000)  # expired: taken over
    assert not store.claim_duty("reclaimer", "serve-a", ttl_ms=200)
    store.release_duty("reclaimer", "serve-b")  # stepping down
    assert store.claim_duty("reclaimer", "serve-a", ttl_ms=200)
    assert not store.claim_duty("promoter", "serve-a", ttl_ms=200)
    with pytest.raises(InvalidInput, match="ttl_ms"):
        store.claim_duty("reclaimer", "serve-a", ttl_ms=0)


def test_renew_extends_only_an_unexpired_lease_of_its_holder(store: Store) -> None:
    assert store.claim_duty("d", "a", 60_000)
    assert store.renew_duty("d", "a", 60_000)
    assert not store.renew_duty("d", "b", 60_000)
    store.release_duty("d", "a")  # a's lease lapses; b takes it, runs, steps down
    assert store.claim_duty("d", "b", 60_000)
    store.release_duty("d", "b")
    assert not store.renew_duty("d", "a", 60_000)  # b ran meanwhile: a must not go on
    assert store.claim_duty("d", "a", 60_000)  # a fresh claim is a fresh run


def test_renew_moves_the_expiry_on_from_the_store_clock(store: Store) -> None:
    assert store.claim_duty("d", "a", 1_000)
    first = expiry(store, "d")
    assert first <= store.now_ms() + 1_000
    assert store.renew_duty("d", "a", 600_000)
    renewed = expiry(store, "d")
    assert renewed >= first + 599_000
    assert renewed <= store.now_ms() + 600_000


def test_a_lease_that_ran_out_is_not_renewed_even_for_its_holder(store: Store) -> None:
    assert store.claim_duty("d", "a", 50)
    wait_until(store, expiry(store, "d") + 1)
    assert not store.renew_duty("d", "a", 60_000)
    assert expiry(store, "d") <= store.now_ms()  # the refusal did not extend it
    assert store.claim_duty("d", "b", 60_000)  # so another holder may take it


def test_renew_of_a_duty_never_claimed_is_refused(store: Store) -> None:
    assert not store.renew_duty("never", "a", 60_000)
    assert [d.name for d in store.duty_holders()] == []


def test_a_released_lease_is_listed_as_expired(store: Store) -> None:
    assert store.claim_duty("d", "a", 60_000)
    store.release_duty("d", "a")
    (row,) = store.duty_holders()
    assert row.holder == "a" and row.expires_at_ms <= store.now_ms()
    store.release_duty("nothing", "a")  # releasing what no one holds is harmless
    assert [d.name for d in store.duty_holders()] == ["d"]


@pytest.mark.parametrize("call", ["claim_duty", "renew_duty"])
@pytest.mark.parametrize(("name", "holder", "ttl_ms", "needle"), [
    ("", "a", 1_000, "duty"),
    ("d", "", 1_000, "holder"),
    ("d", "a", 0, "ttl_ms"),
])
def test_duty_arguments_are_checked(store: Store, call: str, name: str, holder: str,
                                    ttl_ms: int, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle):
        methodcaller(call, name, holder, ttl_ms)(store)
    assert store.duty_holders() == []


def test_stores_racing_for_a_free_lease_get_one_holder(
    store: Store, open_more: Callable[[], Store]
) -> None:
    stores = [store] + [open_more() for _ in range(3)]
    start = threading.Barrier(len(stores))
    won: dict[str, bool] = {}

    def race(i: int, s: Store) -> None:
        start.wait()
        won[f"h{i}"] = s.claim_duty("scheduler", f"h{i}", 60_000)

    threads = [threading.Thread(target=race, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winners = [h for h, ok in won.items() if ok]
    assert len(won) == len(stores) and len(winners) == 1
    assert [d.holder for d in store.duty_holders()] == winners
