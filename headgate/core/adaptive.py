"""Adaptive rate classes: the rules a class's fleet-wide limit follows when the
downstream it guards says "too many" (a handler's ``Throttled``).

Additive increase, multiplicative decrease (AIMD), the rule TCP congestion control
uses: a throttle cuts the limit to ``limit x decrease_factor`` (never below ``min``),
at most once per window however many workers report one, because every attempt already
in flight when the downstream filled up reports it too; each window in which jobs of the
class succeeded adds ``increase_step`` (never past ``max``), so the limit probes back up
until the downstream pushes back again. The store applies these rules in its own
transactions (adapters/shared/adaptive.py), so every host follows one limit.

Pure: no clock is read here; callers pass the store's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from .envelope import INT64_MAX
from .errors import InvalidInput

# A throttled job of no rate class (or of a class that is gone) runs again this much later
# when the handler named no retry_after_ms.
DEFAULT_THROTTLE_DELAY_MS = 1_000
# How far back the console charts a class's limit.
HISTORY_SHOWN_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Adaptive:
    """An adaptive class's bounds and steps (the API's `adaptive` block)."""

    min: int
    max: int
    decrease_factor: float
    increase_step: int

    @classmethod
    def checked(cls, min: Any, max: Any, decrease_factor: Any,
                increase_step: Any) -> Adaptive:
        """Raises InvalidInput naming the first field that is out of range."""
        for name, value in (("adaptive.min", min), ("adaptive.max", max),
                            ("adaptive.increase_step", increase_step)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInput(f"{name} must be an integer")
        if not 1 <= min <= INT64_MAX:
            raise InvalidInput("adaptive.min must be >= 1")
        if not min <= max <= INT64_MAX:
            raise InvalidInput("adaptive.min must not be greater than adaptive.max")
        if increase_step < 0 or increase_step > INT64_MAX:
            raise InvalidInput("adaptive.increase_step must be >= 0")
        if isinstance(decrease_factor, bool) or not isinstance(decrease_factor, int | float):
            raise InvalidInput("adaptive.decrease_factor must be a number")
        factor = float(decrease_factor)
        if not (math.isfinite(factor) and 0.0 < factor < 1.0):
            raise InvalidInput("adaptive.decrease_factor must be greater than 0 and less than 1")
        return cls(min, max, factor, increase_step)

    def as_dict(self) -> dict[str, Any]:
        return {"min": self.min, "max": self.max, "decrease_factor": self.decrease_factor,
                "increase_step": self.increase_step}

    def check_limit(self, limit: int) -> None:
        if not self.min <= limit <= self.max:
            raise InvalidInput(
                f"limit must be within adaptive.min..adaptive.max ({self.min}..{self.max})")

    def decreased(self, limit: int) -> int:
        """The limit after a throttle: by the factor, at least one less while above the
        floor (a small limit times 0.9 would otherwise round back to itself)."""
        cut = math.floor(limit * self.decrease_factor)
        if cut >= limit:
            cut = limit - 1
        return max(self.min, cut)

    def increased(self, limit: int) -> int:
        return min(self.max, limit + self.increase_step)


def may_decrease(now_ms: int, last_decrease_ms: int | None, window_ms: int) -> bool:
    """Once per window, fleet-wide: throttles from attempts admitted before the last
    cut are that cut's echo, not news."""
    return last_decrease_ms is None or now_ms >= last_decrease_ms + window_ms


def may_increase(now_ms: int, last_increase_ms: int | None, last_decrease_ms: int | None,
                 window_ms: int) -> bool:
    """Once per window, and not in the window of a cut (its successes were admitted at
    the rate that was too high)."""
    return all(t is None or now_ms >= t + window_ms for t in (last_increase_ms,
                                                               last_decrease_ms))


def scaled_burst(base_burst: int, base_limit: int, limit: int) -> int:
    """An adapted limit keeps the burst's proportion to it that the operator set: a
    burst of the configured limit's size would let a full bucket overrun the downstream
    the limit was cut for."""
    return max(1, (base_burst * limit + base_limit // 2) // max(1, base_limit))


def rate_text(limit: int, window_ms: int) -> str:
    """`12/s`, `600/min`, `5/h`, else `3 per 250 ms`."""
    unit = {1_000: "s", 60_000: "min", 3_600_000: "h"}.get(window_ms)
    return f"{limit}/{unit}" if unit else f"{limit} per {window_ms} ms"


def clock_text(at_ms: int) -> str:
    """A store time as the console shows one: `12:01 UTC`."""
    return time.strftime("%H:%M", time.gmtime(at_ms / 1000)) + " UTC"


def summary(name: str, window_ms: int, limit_now: int,
            last_cut: tuple[int, int, int] | None) -> str:
    """What explain says of an adaptive class: its last cut `(at_ms, limit after,
    throttles)` and, when the limit has moved since, where it stands now."""
    if last_cut is None:
        return (f"rate class {name} is adaptive, at {rate_text(limit_now, window_ms)}; "
                "no throttle has lowered it")
    at_ms, cut_to, throttles = last_cut
    noun = "throttle" if throttles == 1 else "throttles"
    text = (f"rate class {name} adapted down to {rate_text(cut_to, window_ms)} after "
            f"{throttles} {noun} at {clock_text(at_ms)}")
    if limit_now != cut_to:
        text += f", {rate_text(limit_now, window_ms)} now"
    return text
