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
