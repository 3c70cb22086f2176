"""Adaptive rate classes: a throttle snoozes the job without spending an attempt and
cuts the class's limit by its factor, at most once per window across every connection,
never below its min; successes raise it by its step, at most once per window, never
past its max; the changes are kept as history and named by explain."""

# mypy: disable-error-code="union-attr"
from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import headgate
from headgate import InvalidInput, Outcome, State
from headgate.core import AckRequest
from headgate.core.adaptive import DEFAULT_THROTTLE_DELAY_MS, Adaptive
from headgate.core.records import AdaptiveState, RateClassState


def _limit(store: headgate.Store, name: str) -> int:
    return next(rc for rc in store.rate_classes() if rc.name == name).limit_per_window


def _record(store: headgate.Store, name: str) -> RateClassState:
    return next(rc for rc in store.rate_classes() if rc.name == name)


def _adaptive(store: headgate.Store, name: str) -> AdaptiveState:
    found = _record(store, name).adaptive
    assert found is not None
    return found


def _claims(store: headgate.Store, n: int, queue: str = "aq", rate_class: str = "smtp",
            worker: str = "w") -> list[headgate.Claim]:
    headgate.Client(store).enqueue_many([
        headgate.Envelope(kind="k", payload=b"%d" % i, queue=queue, rate_class=rate_class)
        for i in range(n)])
    claims = store.admit(worker, [queue], n)
    assert len(claims) == n
    return claims


def _past_window(store: headgate.Store, since_ms: int | None, window_ms: int) -> None:
    """Wait until the store's clock has left the window that began at `since_ms`."""
    assert since_ms is not None
    while store.now_ms() < since_ms + window_ms:
        time.sleep(0.002)


def test_throttle_snoozes_without_spending_an_attempt(store: headgate.Store) -> None:
    store.upsert_rate_class("smtp", 100, 60_000, adaptive=Adaptive(2, 200, 0.5, 1))
    a, b = _claims(store, 2)
    before = store.now_ms()
    store.ack(a, Outcome.THROTTLED, delay_ms=30_000)
    store.ack(b, Outcome.THROTTLED)  # no delay given: the class's window
    for claim, wait in ((a, 30_000), (b, 60_000)):
        job = store.get_job(claim.job.id)
        assert job.state is State.SCHEDULED
        assert job.attempt == 0 and job.crash_attempt == 0 and job.errors == []
        assert before + wait <= job.scheduled_at_ms <= store.now_ms() + wait


def test_throttle_without_an_adaptive_class_is_a_snooze(store: headgate.Store) -> None:
    store.upsert_rate_class("plain", 10, 60_000)
    classed, = _claims(store, 1, queue="p1", rate_class="plain")
    unclassed, = _claims(store, 1, queue="p2", rate_class="")
    before = store.now_ms()
    store.ack_many([AckRequest(classed, "throttled"), AckRequest(unclassed, "throttled")])
    assert _limit(store, "plain") == 10 and _record(store, "plain").adaptive is None
    job = store.get_job(unclassed.job.id)
    assert job.state is State.SCHEDULED and job.attempt == 0
    assert job.scheduled_at_ms >= before + DEFAULT_THROTTLE_DELAY_MS
    assert store.get_job(classed.job.id).scheduled_at_ms >= before + 60_000
    assert store.rate_class_history("plain", 0) == []


def test_a_cut_is_by_the_factor_once_per_window_however_many_throttle(
        store: headgate.Store, open_more: Callable[[], headgate.Store]) -> None:
    store.upsert_rate_class("smtp", 40, 60_000, adaptive=Adaptive(2, 100, 0.5, 1))
    claims = _claims(store, 8)
    others = [open_more(), open_more()]
    barrier = threading.Barrier(len(claims))
    errors: list[BaseException] = []

    def throttle(i: int) -> None:
        try:
            barrier.wait()
            others[i % 2].ack(claims[i], Outcome.THROTTLED, delay_ms=1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=throttle, args=(i,)) for i in range(len(claims))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _limit(store, "smtp") == 20  # 40 x 0.5 once, not 40 x 0.5^8
    record = _record(store, "smtp")
    assert record.burst == 20  # the burst keeps its proportion to the limit
    assert _adaptive(store, "smtp").throttles_since_decrease == 7
    cuts = [h for h in store.rate_class_history("smtp", 0) if h.change == "decrease"]
    assert [(c.limit_per_window, c.throttles) for c in cuts] == [(20, 1)]
    assert all(store.get_job(c.job.id).attempt == 0 for c in claims)


def test_cuts_stop_at_min_and_the_next_window_cuts_again(store: headgate.Store) -> None:
    store.upsert_rate_class("smtp", 10, 50, adaptive=Adaptive(3, 10, 0.5, 0))
    claims = _claims(store, 4)
    seen = []
    for claim in claims:
        store.ack(claim, Outcome.THROTTLED, delay_ms=60_000)
        seen.append(_limit(store, "smtp"))
        _past_window(store, _adaptive(store, "smtp").last_decrease_ms, 50)
    assert seen == [5, 3, 3, 3]
    history = store.rate_class_history("smtp", 0)
    assert [h.change for h in history] == ["set", "decrease", "decrease", "decrease",
                                              "decrease"]
    assert all(h.throttles == 1 for h in history[1:])


def test_successes_raise_by_the_step_once_per_window_up_to_max(
        store: headgate.Store) -> None:
    store.upsert_rate_class("smtp", 10, 40, adaptive=Adaptive(1, 13, 0.5, 2))
    claims = _claims(store, 6)
    # Two successes in one window: one step.
    store.ack_many([AckRequest(claims[0], "success"), AckRequest(claims[1], "success")])
    assert _limit(store, "smtp") == 12
    seen = []
    for claim in claims[2:]:
        _past_window(store, _adaptive(store, "smtp").last_increase_ms, 40)
        lost, _ = store.ack_and_admit([AckRequest(claim, "success")], "w", ["other"], 1)
        assert lost == []
        seen.append(_limit(store, "smtp"))
    assert seen == [13, 13, 13, 13]  # capped at max
    assert _record(store, "smtp").burst == 13


def test_no_rise_in_the_window_of_a_cut(store: headgate.Store) -> None:
    store.upsert_rate_class("smtp", 20, 60_000, adaptive=Adaptive(1, 40, 0.5, 5))
    a, b = _claims(store, 2)
    store.ack(a, Outcome.THROTTLED, delay_ms=1)
    store.ack(b, Outcome.SUCCESS)
    assert _limit(store, "smtp") == 10


def test_failures_and_lost_acks_do_not_raise(store: headgate.Store) -> None:
    store.upsert_rate_class("smtp", 20, 10, adaptive=Adaptive(1, 40, 0.5, 5))
    a, b = _claims(store, 2)
    store.ack(a, Outcome.SUCCESS)
    assert _limit(store, "smtp") == 25
    _past_window(store, _adaptive(store, "smtp").last_increase_ms, 10)
    assert store.ack_many([AckRequest(a, "success"),
                           AckRequest(b, "retry", error="x", delay_ms=60_000)]) == [a.job.id]
    assert _limit(store, "smtp") == 25


def test_put_again_keeps_what_was_learned_a_new_limit_starts_over(
        store: headgate.Store) -> None:
    spec = Adaptive(2, 100, 0.5, 1)
    store.upsert_rate_class("smtp", 40, 60_000, burst=80, adaptive=spec)
    claim, = _claims(store, 1)
    store.ack(claim, Outcome.THROTTLED, delay_ms=1)
    assert (_limit(store, "smtp"), _record(store, "smtp").burst) == (20, 40)
    store.upsert_rate_class("smtp", 40, 60_000, burst=80, adaptive=spec)
    assert _limit(store, "smtp") == 20
    store.upsert_rate_class("smtp", 40, 60_000, burst=80, adaptive=Adaptive(25, 100, 0.5, 1))
    assert _limit(store, "smtp") == 25  # kept, within the new bounds
    store.upsert_rate_class("smtp", 30, 60_000, adaptive=spec)
    assert _limit(store, "smtp") == 30
    store.upsert_rate_class("smtp", 30, 60_000)  # no longer adaptive
    assert _record(store, "smtp").adaptive is None
    assert [h.change for h in store.rate_class_history("smtp", 0)] == [
        "set", "decrease", "set", "set"]


@pytest.mark.parametrize(("limit", "args", "message"), [
    (10, (20, 5, 0.5, 1), "adaptive.min must not be greater than adaptive.max"),
    (10, (1, 20, 1.0, 1), "decrease_factor must be greater than 0 and less than 1"),
    (10, (1, 20, 0.0, 1), "decrease_factor must be greater than 0 and less than 1"),
    (10, (1, 20, 0.5, -1), "adaptive.increase_step must be >= 0"),
    (10, (0, 20, 0.5, 1), "adaptive.min must be >= 1"),
    (30, (1, 20, 0.5, 1), "limit must be within adaptive.min..adaptive.max"),
])
def test_bad_adaptive_settings_are_refused_and_change_nothing(
        store: headgate.Store, limit: int, args: tuple, message: str) -> None:
    store.upsert_rate_class("smtp", 7, 1000)
    with pytest.raises(InvalidInput, match=message):
        store.upsert_rate_class("smtp", limit, 1000, adaptive=Adaptive.checked(*args))
    assert _limit(store, "smtp") == 7 and _record(store, "smtp").adaptive is None
    assert store.rate_class_history("smtp", 0) == []


def test_explain_names_the_last_cut(store: headgate.Store) -> None:
    store.upsert_rate_class("smtp", 15, 1000, adaptive=Adaptive(2, 100, 0.8, 1))
    claim, = _claims(store, 1)
    waiting = headgate.Client(store).enqueue("k", b"w", queue="aq", rate_class="smtp")
    store.ack(claim, Outcome.THROTTLED, delay_ms=60_000)
    at = _adaptive(store, "smtp").last_decrease_ms
    assert at is not None
    detail = store.explain_admission(waiting).detail
    clock = time.strftime("%H:%M", time.gmtime(at / 1000))
    assert detail["adaptive"]["summary"] == (
        f"rate class smtp adapted down to 12/s after 1 throttle at {clock} UTC")
    assert detail["adaptive"]["limit_per_window"] == 12


def test_history_ages_out_with_the_buckets(store: headgate.Store) -> None:
    store.upsert_rate_class("smtp", 15, 1000, adaptive=Adaptive(2, 100, 0.8, 1))
    assert len(store.rate_class_history("smtp", 0)) == 1
    time.sleep(0.01)
    store.prune_history(0)
    assert store.rate_class_history("smtp", 0) == []
