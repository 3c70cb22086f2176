"""Admission policy as the store reports it: rate classes, concurrency limits and the
quarantine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConcurrencyLimit:
    """At most `max_concurrent` running jobs per partition of `queue`; `on_saturated`
    says what happens to the rest (core/policy.py's SATURATION_STRATEGIES)."""

    name: str
    queue: str
    max_concurrent: int
    on_saturated: str


@dataclass(frozen=True, slots=True)
class QuarantineEntry:
    """A payload fingerprint that crashed workers `crash_count` times: its jobs wait
    quarantined until an operator releases it."""

    fingerprint: str
    kind: str
    crash_count: int
    quarantined_at_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class AdaptiveState:
    """An adaptive class's bounds and steps (core/adaptive.py's Adaptive), the limit
    and burst an operator set, and where adaptation stands: its last moves, the
    throttles counted since the last cut, and a sentence saying so."""

    min: int
    max: int
    decrease_factor: float
    increase_step: int
    configured_limit: int
    configured_burst: int
    last_decrease_ms: int | None
    last_increase_ms: int | None
    throttles_since_decrease: int
    summary: str


@dataclass(frozen=True, slots=True)
class RateClassState:
    """A rate class's token bucket now (store time): its settings, the tokens left,
    the available jobs naming it and how long until one more token (`refill_in_ms`).
    `adaptive` None: the limit is the operator's, fixed."""

    name: str
    tokens_available: float
    burst: int
    limit_per_window: int
    window_ms: int
    jobs_waiting: int
    paused: bool
    refill_in_ms: int
    adaptive: AdaptiveState | None = None


@dataclass(frozen=True, slots=True)
class RateClassChange:
    """One change of an adaptive class's limit: `change` set (an operator), decrease
    (a throttle; `throttles` counted up to it) or increase (successes)."""

    at_ms: int
    limit_per_window: int
    window_ms: int
    change: str
    throttles: int
