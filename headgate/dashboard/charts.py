"""Geometry for the server-rendered SVG charts.

Only numbers leave this module: the templates turn them into `<polyline>`/`<rect>`
elements, so there is no markup built from strings here and nothing to escape. Charts
are plain SVG with a text table fallback in the template for screen readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from headgate.core.records import AdmissionRejections, HistoryBucket, RateClassChange

from .present import clock

SERIES = ("arrived", "completed", "failed")
POLICIES = ("rate_class", "concurrency_limit", "quarantine")


@dataclass
class HistoryChart:
    width: int
    height: int
    plot_top: int
    plot_bottom: int
    plot_left: int
    plot_right: int
    rej_top: int = 0
    rej_bottom: int = 0
    lines: dict[str, str] = field(default_factory=dict)  # series -> "x,y x,y …"
    bars: list[dict[str, Any]] = field(default_factory=list)  # rejection stacks
    y_ticks: list[dict[str, Any]] = field(default_factory=list)
    rej_ticks: list[dict[str, Any]] = field(default_factory=list)
    x_ticks: list[dict[str, Any]] = field(default_factory=list)
    columns: list[dict[str, Any]] = field(default_factory=list)  # hover targets, per bucket
    totals: dict[str, int] = field(default_factory=dict)
    # Per policy, the most jobs one admission pass held back in any bucket (the history
    # keeps each minute's largest pass: a sum over buckets would be job-minutes).
    rejections: dict[str, int] = field(default_factory=dict)
    empty: bool = True
    buckets: int = 0
    bucket_ms: int = 60_000


def compact(v: int) -> str:
    """Axis labels short enough for a phone: 500, 2.5k, 12k, 1.5M."""
    for size, unit in ((1_000_000, "M"), (1000, "k")):
        if v >= size:
            n = v / size
            return f"{n:.1f}".rstrip("0").rstrip(".") + unit if n < 10 else f"{n:.0f}{unit}"
    return str(v)


def _nice_max(value: int) -> int:
    if value <= 4:
        return 4
    magnitude = 10 ** (len(str(value)) - 1)
    for step in (1, 2, 2.5, 5, 10):
        top = int(step * magnitude)
        if top >= value:
            return top
    return value


def history_chart(
    buckets: Sequence[HistoryBucket], since_ms: int, now_ms: int, bucket_ms: int,
    width: int = 960, height: int = 284,
) -> HistoryChart:
    """Lines for arrived/completed/failed per bucket over [since, now] on the upper
    plot, and the jobs admission held back by policy (per bucket, the most one pass
    turned away: see rows.bump_history) as stacked bars in a strip below it with
    their OWN axis (0 and its nice maximum are labelled beside the strip), so a bar of
    12,484 reads against 0–20,000, never against the lines' 0–500. Each bucket also gets
    a hover column carrying its numbers for the readout (headgate.js)."""
    left, right, top, bottom = 64, width - 12, 12, 166
    rej_top, rej_bottom = 198, 246
    chart = HistoryChart(width, height, top, bottom, left, right, rej_top, rej_bottom,
                         bucket_ms=bucket_ms)
    start = since_ms - since_ms % bucket_ms
    n = max(1, (now_ms - start) // bucket_ms + 1)
    chart.buckets = n
    by_at = {b.at_ms: b for b in buckets}
    series = {s: [0] * n for s in SERIES}
    rejected = {p: [0] * n for p in POLICIES}
    for i in range(n):
        b = by_at.get(start + i * bucket_ms)
        if b is None:
            continue
        r = b.admission_rejections
        series["arrived"][i], series["completed"][i], series["failed"][i] = (
            b.arrived, b.completed, b.failed)
        rejected["rate_class"][i], rejected["concurrency_limit"][i], rejected["quarantine"][i] = (
            r.rate_class, r.concurrency_limit, r.quarantine)
    chart.totals = {s: sum(v) for s, v in series.items()}
    chart.rejections = {p: max(v, default=0) for p, v in rejected.items()}
    chart.empty = not any(chart.totals.values()) and not any(chart.rejections.values())
    ymax = _nice_max(max((max(v) for v in series.values()), default=0))
    span_x = right - left
    step = span_x / n

    def x(i: int) -> float:  # the middle of bucket i
        return round(left + (i + 0.5) * step, 1)

    def y(v: int) -> float:
        return round(bottom - (bottom - top) * v / ymax, 1)

    for s in SERIES:
        chart.lines[s] = " ".join(f"{x(i)},{y(v)}" for i, v in enumerate(series[s]))
    rej_max = _nice_max(max((sum(rejected[p][i] for p in POLICIES) for i in range(n)),
                            default=0))
    band = rej_bottom - rej_top
    bar_w = max(1.0, round(step * 0.7, 1))
    for i in range(n):
        base = float(rej_bottom)
        for p in POLICIES:
            v = rejected[p][i]
            if not v:
                continue
            h = round(band * v / rej_max, 1)
            chart.bars.append({"x": round(x(i) - bar_w / 2, 1), "y": round(base - h, 1),
                               "w": bar_w, "h": h, "policy": p, "value": v})
            base -= h
    chart.rej_ticks = [{"y": rej_bottom, "label": "0"},
                       {"y": rej_top, "label": compact(rej_max)}]
    for k in range(5):
        v = ymax * k // 4
        chart.y_ticks.append({"y": y(v), "label": compact(v)})
    marks = min(6, n)
    for k in range(marks):
        i = round(k * (n - 1) / (marks - 1)) if marks > 1 else 0
        at = start + i * bucket_ms
        anchor = "start" if k == 0 and marks > 1 else "end" if k == marks - 1 and marks > 1 \
            else "middle"
        chart.x_ticks.append({"x": x(i), "label": clock(at)[11:16], "anchor": anchor,
                              "minor": k % 2 == 1})
    for i in range(n):
        at = start + i * bucket_ms
        chart.columns.append({
            "x": round(left + i * step, 1), "w": round(step, 1), "cx": x(i),
            "at": clock(at)[11:16], **{s: series[s][i] for s in SERIES},
            "rejected": sum(rejected[p][i] for p in POLICIES),
        })
    return chart


def throughput(counters: dict[str, dict[int, tuple[int, ...]]]) -> list[HistoryBucket]:
    """Every queue's per-minute counters (Store.history_counters) summed per minute, as
    the buckets history_chart reads: the overview's fleet-wide throughput."""
    merged: dict[int, list[int]] = {}
    for per_queue in counters.values():
        for at, values in per_queue.items():
            row = merged.setdefault(at, [0] * 6)
            for k, v in enumerate(values[:6]):
                row[k] += int(v or 0)
    return [HistoryBucket(at, r[0], r[1], r[2], None, AdmissionRejections(r[3], r[4], r[5]))
            for at, r in sorted(merged.items())]


def bar_fraction(value: float | int | None, total: float | int | None) -> float:
    """0..1 for a bar, never NaN or past either end."""
    if not total or value is None:
        return 0.0
    return max(0.0, min(1.0, float(value) / float(total)))


# The depth bar's segments, in the order work flows out: what runs, what waits to run,
# what waits for time, what waits for an operator. Dead letters, quarantined and
# completed jobs are not work left, so they are counts beside the bar, never the bar.
DEPTH_STATES = ("running", "available", "retryable", "scheduled", "pending")


def depth_segments(by_state: dict[str, int], scale: int) -> list[dict[str, Any]]:
    """Segments (state, x%, w%, n) of a queue's unfinished work, drawn to `scale`
    (the largest unfinished count among the queues shown), so bars compare across rows
    and a queue with nothing unfinished has no bar at all. A non-empty segment is at
    least 0.5% wide, so one job is visible next to ten thousand."""
    shown = [(s, int(by_state.get(s, 0) or 0)) for s in DEPTH_STATES if by_state.get(s)]
    total = sum(n for _, n in shown)
    scale = max(scale, total)
    out: list[dict[str, Any]] = []
    x = 0.0
    if not scale:
        return out
    for s, n in shown:
        w = max(0.5, 100.0 * n / scale)
        w = min(w, 100.0 - x)
        if w <= 0:
            break
        out.append({"state": s, "x": round(x, 2), "w": round(w, 2), "n": n})
        x += w
    return out


@dataclass
class LimitChart:
    """An adaptive rate class's limit over the last hour: one line, a dot per cut."""

    width: int
    height: int
    plot_top: int
    plot_bottom: int
    plot_left: int
    plot_right: int
    points: str = ""
    cuts: list[dict[str, Any]] = field(default_factory=list)
    y_ticks: list[dict[str, Any]] = field(default_factory=list)
    x_ticks: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)  # the text fallback


def limit_chart(changes: list[RateClassChange], since_ms: int, now_ms: int, limit_now: int,
                ceiling: int, width: int = 480, height: int = 140) -> LimitChart:
    """The limit as admission saw it over [since, now]: a cut or an operator's setting
    is a step (the old limit held until then), a climb a slope (consecutive increases
    share one history row); the line starts from the limit in force at `since` and
    ends at `limit_now`. Drawn against 0..`ceiling` (the class's max), so a class near
    its max reads as near the top."""
    left, right, top, bottom = 44, width - 8, 10, height - 24
    chart = LimitChart(width, height, top, bottom, left, right)
    span = max(1, now_ms - since_ms)
    ymax = _nice_max(max([ceiling, limit_now, *(c.limit_per_window for c in changes)]))

    def x(at: int) -> float:
        return round(left + (right - left) * (min(max(at, since_ms), now_ms) - since_ms)
                     / span, 1)

    def y(v: int) -> float:
        return round(bottom - (bottom - top) * v / ymax, 1)

    before = [c for c in changes if c.at_ms < since_ms]
    shown = [c for c in changes if c.at_ms >= since_ms]
    level = before[-1].limit_per_window if before else (
        shown[0].limit_per_window if shown else limit_now)
    pts = [(x(since_ms), y(level))]
    for c in shown:
        if c.change != "increase":
            pts.append((x(c.at_ms), y(level)))
        level = c.limit_per_window
        pts.append((x(c.at_ms), y(level)))
        if c.change == "decrease":
            chart.cuts.append({"x": x(c.at_ms), "y": y(level)})
        chart.rows.append({"at": clock(c.at_ms)[11:19], "change": c.change,
                           "limit": level, "throttles": c.throttles})
    pts.append((x(now_ms), y(level)))
    pts.append((x(now_ms), y(limit_now)))
    chart.points = " ".join(f"{px},{py}" for px, py in pts)
    for k in range(3):
        v = ymax * k // 2
        chart.y_ticks.append({"y": y(v), "label": compact(v)})
    for k, at in enumerate((since_ms, since_ms + span // 2, now_ms)):
        chart.x_ticks.append({"x": x(at), "label": clock(at)[11:16],
                              "anchor": ("start", "middle", "end")[k]})
    return chart
