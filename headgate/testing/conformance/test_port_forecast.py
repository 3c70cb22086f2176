"""Store.forecast_inputs on both engines: places in the admission order, the oldest
waiting job per queue and the waiting jobs' rate classes."""

from __future__ import annotations

from headgate import Client, Store


def test_places_follow_admission_order(store: Store, client: Client) -> None:
    a = [client.enqueue("work", f"a{i}".encode(), partition_key="a") for i in range(4)]
    b = client.enqueue("work", b"b0", partition_key="b")
    urgent = client.enqueue("work", b"a-urgent", partition_key="a", priority=5)
    got = store.forecast_inputs([*a, b, urgent, "missing"], [])
    # The urgent job goes first in its partition; the others keep arrival order.
    assert got.ahead == {a[0]: 1, a[1]: 2, a[2]: 3, a[3]: 4, b: 0, urgent: 0}
    # What admit takes first is the head of each partition.
    claimed = {c.job.id for c in store.admit("w", ["default"], capacity=2)}
    assert claimed == {urgent, b}
    after = store.forecast_inputs(a, []).ahead
    assert after == {a[0]: 0, a[1]: 1, a[2]: 2, a[3]: 3}
    # A job that is not waiting has no place.
    assert store.forecast_inputs([urgent], []).ahead == {}


def test_oldest_and_class_mix(store: Store, client: Client) -> None:
    first = client.enqueue("work", b"1", queue="mail", rate_class="smtp")
    client.enqueue("work", b"2", queue="mail", rate_class="smtp")
    client.enqueue("work", b"3", queue="mail")
    client.enqueue("work", b"4", queue="other")
    got = store.forecast_inputs([], ["mail", "empty"])
    assert got.oldest == {"mail": first}
    assert got.classes == {"mail": {"smtp": 2, "": 1}}
    assert got.ahead == {}
    assert got.ahead_limit >= 1000 and got.class_sample >= 100
