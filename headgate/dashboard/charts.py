"""Geometry for the server-rendered SVG charts.

Only numbers leave this module: the templates turn them into `<polyline>`/`<rect>`
elements, so there is no markup built from strings here and nothing to escape. Charts
are plain SVG with a text table fallback in the template for screen readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    lines: dict[str, str] = field(default_factory=dict)  # series -> "x,y x,y …"
    bars: list[dict[str, Any]] = field(default_factory=list)  # rejection stacks
    y_ticks: list[dict[str, Any]] = field(default_factory=list)
    x_ticks: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    rejections: dict[str, int] = field(default_factory=dict)
    empty: bool = True
    buckets: int = 0


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
    buckets: list[dict[str, Any]], since_ms: int, now_ms: int, bucket_ms: int,
    width: int = 960, height: int = 240,
) -> HistoryChart:
    """Lines for arrived/completed/failed per bucket over [since, now], and under them
    stacked bars of admission rejections by policy (on their own scale, in the bottom
    quarter) so "jobs are arriving but the rate class rejects them" is visible at once."""
    left, right, top, bottom = 44, width - 8, 10, height - 24
    chart = HistoryChart(width, height, top, bottom, left, right)
    start = since_ms - since_ms % bucket_ms
    n = max(1, (now_ms - start) // bucket_ms + 1)
    chart.buckets = n
    by_at = {b["at_ms"]: b for b in buckets}
    series = {s: [0] * n for s in SERIES}
    rejected = {p: [0] * n for p in POLICIES}
    for i in range(n):
        b = by_at.get(start + i * bucket_ms)
        if not b:
            continue
        for s in SERIES:
            series[s][i] = int(b.get(s) or 0)
        for p in POLICIES:
            rejected[p][i] = int((b.get("admission_rejections") or {}).get(p) or 0)
    chart.totals = {s: sum(v) for s, v in series.items()}
    chart.rejections = {p: sum(v) for p, v in rejected.items()}
    chart.empty = not any(chart.totals.values()) and not any(chart.rejections.values())
    ymax = _nice_max(max((max(v) for v in series.values()), default=0))
    span_x = right - left
    step = span_x / max(1, n - 1) if n > 1 else 0

    def x(i: int) -> float:
        return round(left + i * step, 1) if n > 1 else left + span_x / 2

    def y(v: int) -> float:
        return round(bottom - (bottom - top) * v / ymax, 1)

    for s in SERIES:
        chart.lines[s] = " ".join(f"{x(i)},{y(v)}" for i, v in enumerate(series[s]))
    rej_max = max((sum(rejected[p][i] for p in POLICIES) for i in range(n)), default=0)
    band = (bottom - top) * 0.25
    bar_w = max(1.0, round(span_x / n * 0.7, 1))
    if rej_max:
        for i in range(n):
            base = bottom
            for p in POLICIES:
                v = rejected[p][i]
                if not v:
                    continue
                h = round(band * v / rej_max, 1)
                chart.bars.append({"x": round(x(i) - bar_w / 2, 1), "y": round(base - h, 1),
                                   "w": bar_w, "h": h, "policy": p, "value": v,
                                   "at": clock(start + i * bucket_ms)})
                base -= h
    for k in range(5):
        v = ymax * k // 4
        chart.y_ticks.append({"y": y(v), "label": str(v)})
    marks = 6
    for k in range(marks):
        i = round(k * (n - 1) / (marks - 1)) if n > 1 else 0
        at = start + i * bucket_ms
        anchor = "start" if k == 0 else "end" if k == marks - 1 else "middle"
        chart.x_ticks.append({"x": x(i), "label": clock(at)[11:16], "anchor": anchor})
    return chart


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
    out, x = [], 0.0
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
