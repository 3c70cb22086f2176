"""Per-task retry policies: how long a failed task waits before its next attempt.

A task's ``retry`` is one of

- left out: the store's default backoff (exponential from 1 s, capped at an hour,
  jittered);
- ``Backoff(base_ms, max_ms, jitter)``: exponential from ``base_ms``, capped at
  ``max_ms``, each delay scaled by a random factor in ``1 ± jitter``;
- a callable ``failures -> delay_ms`` (``failures`` counts this one: 1 after the first
  failed attempt);
- ``None``: no retries — the first failure archives the job (like ``Skip``).

``retry_on=(ExcType, ...)`` narrows which exceptions are retried at all; any other
exception archives the job at once, with its error recorded. ``max_attempts`` still
bounds the retries of either.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from headgate.core import InvalidInput


@dataclass(frozen=True, slots=True)
class Backoff:
    base_ms: int = 1_000
    max_ms: int = 3_600_000
    jitter: float = 0.25

    def __post_init__(self) -> None:
        for name in ("base_ms", "max_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(f"Backoff.{name} must be an integer >= 0 (milliseconds)")
        if self.max_ms < self.base_ms:
            raise InvalidInput("Backoff.max_ms must be >= base_ms")
        if isinstance(self.jitter, bool) or not isinstance(self.jitter, int | float) \
                or not 0 <= self.jitter <= 1:
            raise InvalidInput("Backoff.jitter must be a number in 0..1")

    def __call__(self, failures: int) -> int:
        exp = min(self.max_ms, self.base_ms * 2 ** max(0, min(failures - 1, 62)))
        return max(0, int(exp * random.uniform(1 - self.jitter, 1 + self.jitter)))


RetryPolicy = Backoff | Callable[[int], int] | None


def check_policy(policy: object) -> None:
    if policy is not None and not callable(policy):
        raise InvalidInput("retry must be a Backoff, a callable failures -> delay_ms, or None")


def delay_for(policy: Callable[[int], int], failures: int) -> int:
    delay = policy(failures)
    if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
        raise InvalidInput(f"retry policy returned {delay!r}; it must return an integer "
                           "number of milliseconds >= 0")
    return delay


__all__ = ["Backoff", "RetryPolicy", "check_policy", "delay_for"]
