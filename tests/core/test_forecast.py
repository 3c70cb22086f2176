"""The start forecast's model (headgate/core/forecast.py) on constructed snapshots: each
number follows from the inputs, no store involved."""

from __future__ import annotations

import pytest

from headgate.core.forecast import (
    Change,
    Place,
    QueueInput,
    RateInput,
    RunTime,
    Snapshot,
    WorkerInput,
    apply,
    drain_ms,
    predict,
)

Q = "default"
ONE_WORKER = (WorkerInput((Q,), slots=10, busy=10),)


def snap(waiting: dict[str, int], *, rates: dict[str, RateInput] | None = None,
         workers: tuple[WorkerInput, ...] = ONE_WORKER, ceiling: int | None = None,
         running: dict[str, int] | None = None, drain: float = 0.0,
         paused: bool = False) -> Snapshot:
    queue = QueueInput(Q, paused=paused, waiting=waiting, running=running or {},
                       ceiling=ceiling, drain_per_s=drain)
    class_waiting = {name: sum(waiting.values()) for name in (rates or {})}
    return Snapshot({Q: queue}, rates or {}, workers, class_waiting)


def five_per_s(tokens: float = 0.0, burst: int = 5) -> dict[str, RateInput]:
    return {"c": RateInput(limit=5, window_ms=1000, burst=burst, tokens=tokens)}


def test_thirty_ahead_in_a_five_per_second_class_is_about_six_seconds() -> None:
    s = snap({"": 31}, rates=five_per_s())
    p = predict(s, Place(Q, "", ahead=30, rate_class="c"))
    assert p.bound == "rate_class" and p.reason is None
    assert p.ms == 6200  # the 31st token, 200 ms apart
    assert p.p10_ms is not None and p.p90_ms is not None
    assert p.p10_ms < 6200 < p.p90_ms
    assert p.p10_ms > 4500 and p.p90_ms < 8000


def test_tokens_in_the_bucket_go_at_once() -> None:
    s = snap({"": 31}, rates=five_per_s(tokens=5.0),
             workers=(WorkerInput((Q,), slots=10, busy=0),))
    assert predict(s, Place(Q, "", ahead=30, rate_class="c")).ms == 5200
    head = predict(s, Place(Q, "", ahead=0, rate_class="c"))
    assert (head.ms, head.bound) == (0, "now")


def test_weight_spends_more_tokens() -> None:
    s = snap({"": 10}, rates=five_per_s(burst=10))
    assert predict(s, Place(Q, "", ahead=9, rate_class="c", weight=2)).ms == 4000


def test_fair_rotation_shares_the_rate_between_partitions() -> None:
    # Three tenants of 100 each: the 10th of tenant a waits for 10 of each.
    s = snap({"a": 100, "b": 100, "c": 100}, rates=five_per_s())
    assert predict(s, Place(Q, "a", ahead=9, rate_class="c")).ms == 6000
    # A tenant with 2 waiting stops competing once they are through.
    s = snap({"a": 100, "b": 2}, rates=five_per_s())
    # a gets 2.5/s until b's 2 are done (0.8 s, 2 of a's), then 5/s for the 8 left.
    assert predict(s, Place(Q, "a", ahead=9, rate_class="c")).ms == 2400


def test_workers_bound_by_slots_and_run_time() -> None:
    run = RunTime(mean_ms=1000.0, cv=0.0)
    s = snap({"": 100})  # 10 slots, all busy
    p = predict(s, Place(Q, "", ahead=49, run=run))
    assert (p.ms, p.bound) == (5000, "workers")
    free = snap({"": 100}, workers=(WorkerInput((Q,), slots=10, busy=0),))
    assert predict(free, Place(Q, "", ahead=9, run=run)).bound == "now"
    assert predict(free, Place(Q, "", ahead=19, run=run)).ms == 1000


def test_the_slower_of_class_and_workers_sets_the_pace() -> None:
    run = RunTime(mean_ms=100.0)  # 10 slots / 0.1 s = 100 jobs/s > 5/s
    p = predict(snap({"": 40}, rates=five_per_s()), Place(Q, "", ahead=39, rate_class="c",
                                                          run=run))
    assert (p.ms, p.bound) == (8000, "rate_class")


def test_a_ceiling_caps_each_partition() -> None:
    run = RunTime(mean_ms=1000.0)
    s = snap({"a": 50, "b": 50}, ceiling=2, running={"a": 2, "b": 2},
             workers=(WorkerInput((Q,), slots=100, busy=4),))
    p = predict(s, Place(Q, "a", ahead=9, run=run))
    # 2 running at a time in a, 1 s each: the 10th starts after 5 s.
    assert (p.ms, p.bound) == (5000, "concurrency_limit")


def test_run_time_spread_widens_the_range() -> None:
    s = snap({"": 100})
    steady = predict(s, Place(Q, "", ahead=19, run=RunTime(1000.0, 0.0)))
    noisy = predict(s, Place(Q, "", ahead=19, run=RunTime(1000.0, 1.0)))
    assert steady.ms == noisy.ms
    assert noisy.p90_ms - noisy.p10_ms > steady.p90_ms - steady.p10_ms  # type: ignore[operator]


def test_measured_completions_when_nothing_else_is_known() -> None:
    p = predict(snap({"": 100}, drain=2.0), Place(Q, "", ahead=19))
    assert (p.ms, p.bound) == (10_000, "measured")
    assert predict(snap({"": 100}), Place(Q, "", ahead=19)).reason == "no_measurements"


@pytest.mark.parametrize(("kwargs", "place", "reason"), [
    ({"paused": True}, {}, "queue_paused"),
    ({"workers": ()}, {}, "no_live_worker"),
    ({"workers": (WorkerInput(("other",), 10),)}, {}, "no_live_worker"),
    ({"rates": {"c": RateInput(5, 1000, 5, 5.0, paused=True)}}, {"rate_class": "c"},
     "rate_class_paused"),
    ({"rates": five_per_s()}, {"rate_class": "c", "weight": 6}, "weight_exceeds_burst"),
    ({}, {"quarantined": True}, "quarantined"),
])
def test_nothing_can_be_known(kwargs: dict, place: dict, reason: str) -> None:
    p = predict(snap({"": 5}, **kwargs), Place(Q, "", ahead=2, **place))
    assert p.as_dict() == {"ms": None, "p10_ms": None, "p90_ms": None, "reason": reason,
                           "bound": None}


def test_a_class_shared_with_another_queue_gives_its_backlog_share() -> None:
    s = snap({"": 30}, rates=five_per_s())
    shared = Snapshot(s.queues, s.rates, s.workers, {"c": 60})
    assert predict(shared, Place(Q, "", ahead=29, rate_class="c")).ms == 12_000


def test_drain_of_the_backlog_and_a_doubled_limit() -> None:
    run = RunTime(mean_ms=10.0)
    s = snap({"a": 50, "b": 50}, rates=five_per_s(), workers=(WorkerInput((Q,), 100, 0),))
    before = drain_ms(s, Q, "c", 1, run)
    assert (before.ms, before.bound) == (20_010, "rate_class")  # 100 at 5/s, then one run
    after = drain_ms(apply(s, Change(rate_class="c", limit=10)), Q, "c", 1, run)
    # The doubled limit is the same model at limit 10 (the burst follows the limit).
    direct = drain_ms(snap({"a": 50, "b": 50}, rates={"c": RateInput(10, 1000, 10, 0.0)},
                           workers=(WorkerInput((Q,), 100, 0),)), Q, "c", 1, run)
    assert after == direct
    assert after.ms == 10_010


def test_what_if_more_slots_weight_and_ceiling() -> None:
    run = RunTime(mean_ms=1000.0)
    s = snap({"": 100})
    before = drain_ms(s, Q, run=run)
    after = drain_ms(apply(s, Change(more_slots=10, slots_queues=(Q,))), Q, run=run)
    # 10 slots more, free: 10 at once, 90 at 20 a second, then the last one's run.
    assert before.ms == 11_000 and after.ms == 5500
    capped = snap({"a": 20}, ceiling=1, workers=(WorkerInput((Q,), 100, 0),))
    loose = apply(capped, Change(concurrency_limit_queue=Q, max_concurrent=4))
    assert drain_ms(capped, Q, run=run).ms == 20_000
    assert drain_ms(loose, Q, run=run).ms == 5000
    two = Snapshot({Q: QueueInput(Q, waiting={"": 100}),
                    "b": QueueInput("b", waiting={"": 100})},
                   workers=(WorkerInput((Q, "b"), 10, 10),))
    heavier = apply(two, Change(queue=Q, weight=4))
    assert drain_ms(two, Q, run=run).ms == 21_000  # half the slots
    assert drain_ms(heavier, Q, run=run).ms == 13_500  # four fifths


def test_an_empty_queue_drains_at_once() -> None:
    assert drain_ms(snap({}), Q).ms == 0
