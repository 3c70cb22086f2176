"""Time-to-drain and depth-bar rules on recorded bucket sequences (headgate.core.drain,
headgate.dashboard.charts.depth_segments, and the words present.time_to_drain makes)."""

from __future__ import annotations

from typing import Any

from headgate.core import drain
from headgate.core.records import AdmissionRejections, HistoryBucket
from headgate.dashboard import charts, present

MIN = 60_000
T0 = 1_800_000_000_000 - 1_800_000_000_000 % MIN  # a minute boundary


def recorded(per_min_in: list[int], per_min_out: list[int], now: int) -> dict[int, tuple]:
    """Per-minute counters as the store keeps them: full minutes before `now`, and the
    current minute holding what arrived so far (evenly spread over the minute)."""
    current = now - now % MIN
    out: dict[int, tuple] = {}
    n = len(per_min_in)
    for i in range(n):
        at = current - (n - 1 - i) * MIN
        frac = 1.0 if at < current else (now - current) / MIN
        out[at] = (int(per_min_in[i] * frac), int(per_min_out[i] * frac), 0, 0, 0, 0)
    return out


def queue(unfinished: int, **by_state: int) -> dict[str, Any]:
    states = {s: 0 for s in present.STATE_ORDER}
    states.update(by_state)
    return {"queue": "q", "unfinished_jobs": unfinished, "by_state": states, "paused": False}


def forecast_of(q: dict[str, Any], buckets: dict[int, tuple], now: int) -> drain.Forecast:
    """drain.queue_forecast for one of these console rows."""
    return drain.queue_forecast(q["by_state"], q["paused"], buckets, now)


def test_a_steady_queue_reads_the_same_for_ten_seconds_across_a_minute_boundary() -> None:
    """16/min in and out with 4 waiting: "keeping up", every second from 5 s before a
    minute boundary to 5 s after it (the last-minute rates said growing, drains in 16m
    and empty within those 10 s)."""
    words = set()
    for second in range(-5, 6):
        now = T0 + 20 * MIN + second * 1000
        buckets = recorded([16] * 16, [16] * 16, now)
        f = forecast_of(queue(4, available=4), buckets, now)
        assert f.trend == "steady", (second, f)
        assert abs(f.arrival * 60 - 16) < 1.5 and abs(f.drain * 60 - 16) < 1.5
        words.add(present.time_to_drain({**queue(4, available=4), "forecast": f})[0])
    assert words == {"keeping up · 15 s behind"}


def test_a_burst_of_unequal_minutes_stays_steady() -> None:
    """Completions arrive in lumps (12, 20, 12, 20 …) around arrivals of 16: still steady."""
    now = T0 + 20 * MIN + 30_000
    buckets = recorded([16] * 16, [12, 20] * 8, now)
    assert forecast_of(queue(6, available=6), buckets, now).trend == "steady"


def test_a_queue_emptying_counts_down_then_says_empty() -> None:
    """Arrivals stopped five minutes ago; 30/min drain 60 left: about two minutes, falling
    as the backlog falls, and "empty" (never "growing") once nothing is left."""
    now = T0 + 20 * MIN + 10_000
    arrivals = [30] * 11 + [0] * 5
    buckets = recorded(arrivals, [30] * 16, now)
    f = forecast_of(queue(60, available=60), buckets, now)
    assert f.trend == "draining"
    assert 90_000 <= f.ttd_ms <= 240_000, f
    later = forecast_of(queue(20, available=20), buckets, now)
    assert later.trend == "draining" and later.ttd_ms < f.ttd_ms
    done = forecast_of(queue(0), buckets, now)
    assert done.trend == "empty" and done.ttd_ms == 0
    assert present.time_to_drain({**queue(0), "forecast": done})[:2] == ("empty", "idle")


def test_a_queue_with_only_dead_letters_is_empty_with_no_bar() -> None:
    """0 unfinished, 2 archived, 471 completed: "empty", and the depth bar draws nothing
    (it was a full-width red bar)."""
    q = queue(0, archived=2, completed=471)
    now = T0 + 20 * MIN
    buckets = recorded([16] * 16, [16] * 16, now)
    f = forecast_of(q, buckets, now)
    assert f.trend == "empty"
    assert present.time_to_drain({**q, "forecast": f})[0] == "empty"
    assert charts.depth_segments(q["by_state"], 0) == []
    assert charts.depth_segments(q["by_state"], 500) == []


def test_arrivals_outpacing_drain_is_growing() -> None:
    now = T0 + 20 * MIN + 30_000
    buckets = recorded([30] * 16, [10] * 16, now)
    f = forecast_of(queue(100, available=100), buckets, now)
    assert f.trend == "growing" and f.ttd_ms is None
    words, tone, trend = present.time_to_drain({**queue(100, available=100), "forecast": f})
    assert (words, tone) == ("growing", "warn") and trend.startswith("↑ 20.")


def test_a_young_queue_is_not_averaged_with_minutes_it_never_had() -> None:
    """Two minutes of history at 20/min: the rate is ~20/min, not 20 × 2/15."""
    now = T0 + 20 * MIN + 59_000
    buckets = recorded([20, 20], [20, 20], now)
    rates = drain.smoothed_rates(buckets, now)
    assert abs(rates.arrival * 60 - 20) < 2


def test_nothing_finished_lately_is_not_draining() -> None:
    now = T0 + 20 * MIN
    buckets = recorded([5] * 16, [0] * 16, now)
    f = forecast_of(queue(40, available=40), buckets, now)
    assert f.trend == "stalled"
    assert present.time_to_drain({**queue(40), "forecast": f})[:2] == ("not draining", "bad")
    assert drain.forecast(5, drain.Rates(1, 1), paused=True).trend == "paused"


def test_depth_bars_show_unfinished_work_scaled_across_queues() -> None:
    small = {"available": 10, "archived": 900, "completed": 5000, "quarantined": 3}
    segs = charts.depth_segments(small, 100)
    assert [s["state"] for s in segs] == ["available"]
    assert segs[0]["w"] == 10.0  # 10 of the largest queue's 100
    big = {"running": 40, "available": 60}
    segs = charts.depth_segments(big, 100)
    assert [(s["state"], s["x"], s["w"]) for s in segs] == [("running", 0, 40.0),
                                                            ("available", 40.0, 60.0)]
    # One job beside ten thousand is still visible; the bar never passes 100 %.
    segs = charts.depth_segments({"running": 1, "available": 10_000}, 10_001)
    assert segs[0]["w"] == 0.5 and segs[-1]["x"] + segs[-1]["w"] <= 100.0


def test_work_that_is_not_due_is_not_backlog() -> None:
    """Five jobs scheduled for tomorrow or three pending an operator: nothing for workers
    to drain, said as such (not "growing", not a bare "empty")."""
    now = T0 + 20 * MIN
    buckets = recorded([15] * 16, [0] * 16, now)
    later = queue(5, scheduled=5)
    f = forecast_of(later, buckets, now)
    assert f.trend == "empty"
    assert present.time_to_drain({**later, "forecast": f}) == (
        "nothing due now", "idle", "5 scheduled later")
    held = queue(3, pending=3)
    f = forecast_of(held, buckets, now)
    assert present.time_to_drain({**held, "forecast": f})[:2] == ("held", "idle")


def test_rejection_bars_are_drawn_against_their_own_axis() -> None:
    """Item 5: 12,484 rejections in one minute beside lines of at most 500 fill their
    strip to 12,484 / 20k of its height, and the strip's axis says 20k (the bar was
    drawn at ~125 on the lines' 0–500 axis)."""
    now = T0 + 10 * MIN
    rows = [HistoryBucket(T0 + i * MIN, arrived=500 if i == 3 else 10, completed=10,
                          admission_rejections=AdmissionRejections(
                              rate_class=12_484 if i == 5 else 0)) for i in range(11)]
    chart = charts.history_chart(rows, T0, now, MIN)
    [bar] = chart.bars
    band = chart.rej_bottom - chart.rej_top
    assert chart.rej_ticks[-1]["label"] == "20k"
    assert abs(bar["h"] - band * 12_484 / 20_000) < 0.2
    assert bar["y"] + bar["h"] == chart.rej_bottom
    assert chart.y_ticks[-1]["label"] == "500"
    # One hover column per minute carries that minute's numbers.
    assert len(chart.columns) == 11
    assert (chart.columns[5]["rejected"], chart.columns[3]["arrived"]) == (12_484, 500)


def test_overview_throughput_sums_every_queue_per_minute() -> None:
    counters = {"a": {T0: (3, 2, 1, 5, 0, 0)}, "b": {T0: (1, 1, 0, 0, 2, 0),
                                                     T0 + MIN: (4, 0, 0, 0, 0, 1)}}
    assert charts.throughput(counters) == [
        HistoryBucket(T0, 4, 3, 1, None, AdmissionRejections(5, 2, 0)),
        HistoryBucket(T0 + MIN, 4, 0, 0, None, AdmissionRejections(0, 0, 1)),
    ]
