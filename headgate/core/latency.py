"""The job latency histograms' fixed buckets, shared by the store that fills them
(triggers on `jobs`: SQLite's read the table `latency_bounds`, PostgreSQL's call
`headgate_latency_bound`, both written by `headgate migrate` from LATENCY_BOUNDS_MS, see
core/schema_constants.py) and the `/metrics` export."""

from __future__ import annotations

from typing import Any

# Upper bounds in ms; a row's le_ms of INF is the +Inf bucket.
LATENCY_BOUNDS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
                     300000, 900000, 3600000)
INF = -1
# wait: available -> running; run: running -> terminal.
METRICS = ("wait", "run")

# The percentiles the console and the API report.
QUANTILES = ((50, 0.50), (95, 0.95), (99, 0.99))
# A latency row as the store reads it: (queue, kind, metric, le_ms, n, sum_ms).
LatencyRow = tuple[str, str, str, int, int, int]


def quantile_ms(cells: dict[int, int], q: float) -> int | None:
    """The q-quantile of a histogram {le_ms: count}, interpolated linearly inside its
    bucket as Prometheus' histogram_quantile does; None without observations. A rank
    in the +Inf bucket reads as the largest finite bound (the histogram knows no more)."""
    total = sum(cells.values())
    if total <= 0:
        return None
    rank = q * total
    seen, lower = 0, 0
    for bound in LATENCY_BOUNDS_MS:
        n = cells.get(bound, 0)
        if n and seen + n >= rank:
            return round(lower + (bound - lower) * (rank - seen) / n)
        seen += n
        lower = bound
    return LATENCY_BOUNDS_MS[-1]


def summary(cells: dict[int, list[int]]) -> dict[str, int | None]:
    """{count, mean_ms, p50_ms, p95_ms, p99_ms} of one histogram {le_ms: [n, sum_ms]}."""
    counts = {le: n for le, (n, _) in cells.items()}
    count = sum(counts.values())
    total_ms = sum(s for _, s in cells.values())
    out: dict[str, int | None] = {
        "count": count, "mean_ms": round(total_ms / count) if count else None}
    for label, q in QUANTILES:
        out[f"p{label}_ms"] = quantile_ms(counts, q)
    return out


def summaries(rows: list[LatencyRow], by: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The rows' wait and run summaries in all, and per `by` ("kind" or "queue"), sorted
    by name: ({"wait": …, "run": …}, [{by: name, "wait": …, "run": …}]). Rows of the
    kind '' (written before the histograms had kinds) count in all only."""
    whole: dict[str, dict[int, list[int]]] = {m: {} for m in METRICS}
    parts: dict[str, dict[str, dict[int, list[int]]]] = {}
    for queue, kind, metric, le, n, sum_ms in rows:
        if metric not in whole:
            continue
        name = kind if by == "kind" else queue
        targets = [whole]
        if name:
            targets.append(parts.setdefault(name, {m: {} for m in METRICS}))
        for target in targets:
            cell = target[metric].setdefault(le, [0, 0])
            cell[0] += n
            cell[1] += sum_ms
    totals = {m: summary(whole[m]) for m in METRICS}
    listed = [{by: name, **{m: summary(hist[m]) for m in METRICS}}
              for name, hist in sorted(parts.items())]
    return totals, listed


def window_start(now_ms: int, window_ms: int, bucket_ms: int) -> int:
    """The first minute bucket a window of `window_ms` back from `now_ms` reads (the
    bucket holding its start, so the window is never short of a partial minute)."""
    start = now_ms - window_ms
    return start - start % bucket_ms
