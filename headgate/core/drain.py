"""Time to drain from smoothed rates: the number a queue row leads with.

Why smoothing, and which: the last minute's two history buckets (what queue_stats'
`time_to_drain_ms` uses) swing with every burst of a few jobs, so a queue running at a
steady 16/min in and out flipped between "growing", "drains in 16m" and "empty" within
seconds. Here each rate is an exponentially weighted average over the queue's per-minute
history buckets (half-life 3 minutes, at most 15 minutes back):

    rate = Σ wᵢ·countᵢ / Σ wᵢ·durationᵢ,   wᵢ = ½^(ageᵢ / half-life)

where the current, partial bucket counts with the time elapsed in it (so a minute
boundary is no jump) and the age is measured to each bucket's middle. An EWMA rather
than a regression over recent buckets because it needs no depth samples (history holds
counters, depth only now and then), is defined from the first bucket on, and cannot
extrapolate a trend past what was seen. The window starts at the queue's first bucket
inside it, so a queue born two minutes ago is not averaged with thirteen minutes of
zeros it never had.

Then the forecast: nothing unfinished is `empty` (never `growing`); arrivals and drain
within STEADY_TOLERANCE of each other are `steady` (keeping up: the backlog neither
grows nor shrinks, and the time to drain is how long the current backlog takes once
arrivals stop); otherwise `draining` with backlog / (drain − arrival), or `growing`.
Pure: the caller passes the store's clock and counters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .schema_constants import HISTORY_BUCKET_MS

# The history's buckets, whose counters the rates are computed from.
BUCKET_MS = HISTORY_BUCKET_MS
HALF_LIFE_MS = 3 * 60_000
WINDOW_MS = 15 * 60_000
# |drain − arrival| within this share of the larger rate counts as keeping up.
STEADY_TOLERANCE = 0.15
# Below this (about one job an hour) a rate is nothing.
MIN_RATE_PER_S = 1 / 3600


@dataclass(frozen=True, slots=True)
class Rates:
    arrival: float  # jobs per second
    drain: float  # completions and failures per second


@dataclass(frozen=True, slots=True)
class Forecast:
    trend: str  # empty | paused | stalled | steady | draining | growing
    ttd_ms: int | None  # time to drain, when there is one
    arrival: float
    drain: float


def smoothed_rates(buckets: Mapping[int, Sequence[int]], now_ms: int) -> Rates:
    """Arrival and drain per second from `bucket start → (arrived, completed, failed, …)`
    per-minute counters (Store.history_counters' shape for one queue)."""
    start = now_ms - WINDOW_MS
    present = [at for at in buckets if at + BUCKET_MS > start and at <= now_ms]
    if not present:
        return Rates(0.0, 0.0)
    first = min(present)
    weight_sum = arrived = drained = 0.0
    at = first
    while at <= now_ms:
        lo = max(at, start)
        hi = min(at + BUCKET_MS, now_ms)
        span = hi - lo
        if span > 0:
            age = now_ms - (lo + hi) / 2
            w = 0.5 ** (age / HALF_LIFE_MS)
            counts = buckets.get(at) or (0, 0, 0)
            share = span / BUCKET_MS if at < start else 1.0  # the window cuts this bucket
            arrived += w * counts[0] * share
            drained += w * (counts[1] + counts[2]) * share
            weight_sum += w * span
        at += BUCKET_MS
    if weight_sum <= 0:
        return Rates(0.0, 0.0)
    return Rates(arrived / weight_sum * 1000, drained / weight_sum * 1000)


def forecast(backlog: int, rates: Rates, *, paused: bool = False) -> Forecast:
    """What the queue row says, for `backlog` jobs due (see queue_forecast)."""
    a, d = rates.arrival, rates.drain
    if backlog <= 0:
        return Forecast("empty", 0, a, d)
    if paused:
        return Forecast("paused", None, a, d)
    if d < MIN_RATE_PER_S:
        return Forecast("stalled", None, a, d)
    net = d - a
    if abs(net) <= STEADY_TOLERANCE * max(a, d):
        return Forecast("steady", int(backlog / d * 1000), a, d)
    if net > 0:
        return Forecast("draining", int(backlog / net * 1000), a, d)
    return Forecast("growing", None, a, d)


def recently_drained(buckets: Mapping[int, Sequence[int]], now_ms: int) -> bool:
    """Whether a job finished (completed or failed) in the current history bucket or the
    one before: false means nothing finished for at least one bucket's width."""
    current = now_ms - now_ms % BUCKET_MS
    for at in (current, current - BUCKET_MS):
        counts = buckets.get(at)
        if counts and (counts[1] + counts[2]) > 0:
            return True
    return False


def stall_suspected(by_state: Mapping[str, int], buckets: Mapping[int, Sequence[int]],
                    now_ms: int) -> bool:
    """Jobs wait and none runs, or nothing finished lately: look for what blocks them
    now, whatever the smoothed trend says. The trend lags by design (a queue paused by
    its rate class still read "keeping up" for a minute), the counters do not."""
    if not int(by_state.get("available", 0) or 0):
        return False
    return not int(by_state.get("running", 0) or 0) or not recently_drained(buckets, now_ms)


def queue_forecast(by_state: Mapping[str, int], paused: bool,
                   buckets: Mapping[int, Sequence[int]], now_ms: int) -> Forecast:
    """forecast() for one queue (its counters by state, whether it is paused) and its
    history counters. The backlog is the work due: available, running and retryable
    jobs. Pending jobs wait for an operator and scheduled ones for their time, not for
    workers."""
    backlog = sum(int(by_state.get(s, 0) or 0) for s in ("available", "running", "retryable"))
    return forecast(backlog, smoothed_rates(buckets, now_ms), paused=paused)
