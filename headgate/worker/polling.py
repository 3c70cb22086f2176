"""When to ask the store for work: empty-poll backoff and cheap change hints.

An admit is a write transaction. An idle worker that admitted every few milliseconds
would burn CPU and, on SQLite, contend for the one write lock with the workers that do
have work. So empty polls back off exponentially (floor → ceiling, jittered so a fleet
does not poll in lockstep), and three cheaper signals cut the wait short:

1. the store's in-process ``ActivityHub`` (same-process enqueues, releases, promotions;
   PostgreSQL also feeds it from LISTEN/NOTIFY);
2. a *change probe*: the store's ``change_token()``, a read-only check whether anything
   committed since the last poll (SQLite: ``PRAGMA data_version``, about two
   microseconds, no lock), which sees other processes' commits, so a cross-process
   producer is noticed within one probe interval instead of one backoff ceiling;
3. a slot freeing up after a poll that filled every slot (more work is likely waiting).

Time-driven work (a scheduled job becoming due) commits nothing, so the backoff ceiling
still bounds how late it is noticed; the promoter duty and the admit's own promotion
cover it.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from headgate.store.port import Admission

Probe = Callable[[], object]


class Backoff:
    """Exponential delay for empty polls: floor, ×2 per empty poll, ceiling, ±jitter.

    At the ceiling, where an idle worker spends its time, the jitter goes downward
    only: clipping it there would leave half the fleet polling at exactly the ceiling."""

    def __init__(self, floor_ms: float, ceiling_ms: float, jitter: float = 0.2) -> None:
        if floor_ms <= 0 or ceiling_ms < floor_ms:
            raise ValueError("backoff needs 0 < floor <= ceiling")
        self.floor_ms = floor_ms
        self.ceiling_ms = ceiling_ms
        self.jitter = jitter
        self._current = floor_ms

    def reset(self) -> None:
        self._current = self.floor_ms

    def next_ms(self) -> float:
        """The delay before the next poll; grows for the one after."""
        current = self._current
        high = 1 + self.jitter if current * (1 + self.jitter) <= self.ceiling_ms else 1
        self._current = min(self.ceiling_ms, current * 2)
        return current * random.uniform(1 - self.jitter, high)


def change_probe(store: Admission) -> Probe | None:
    """The store's ``change_token`` as a probe, or None when the backend offers nothing
    cheaper than polling (PostgreSQL's changes arrive by LISTEN instead). Errors count
    as "changed", so a flaky probe degrades to polling rather than to deafness."""
    return _tolerant(store.change_token) if store.capabilities().change_token else None


def _tolerant(probe: Callable[[], object]) -> Probe:
    counter = iter(range(1 << 62))

    def safe() -> object:
        try:
            return probe()
        except Exception:  # noqa: BLE001 - a probe failure must never stop the worker
            return ("error", next(counter))

    return safe
