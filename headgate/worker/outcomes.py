"""What a handler can say about an attempt besides "done".

Each outcome is an exception AND a value: a handler may ``raise Retry(delay_ms=500)``
deep inside a helper (unwinding is the natural way to abort) or ``return Skip("no such
user")`` at the top (reads like a result). Both mean the same thing to the runtime.

Every class pickles through ``args`` in constructor order, so an isolated child process
can send one back to its parent unchanged.
"""

from __future__ import annotations

from typing import ClassVar

from headgate.core import InvalidInput, Outcome


def _delay(name: str, value: int | None, *, required: bool = False) -> int | None:
    if value is None:
        if required:
            raise InvalidInput(f"{name} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an integer number of milliseconds")
    if value < 0:
        raise InvalidInput(f"{name} must be >= 0")
    return value


class JobOutcome(Exception):  # noqa: N818 - these are outcomes, not errors
    """Base of every explicit outcome; ``outcome`` is the transition-table event."""

    outcome: ClassVar[Outcome]
    delay_ms: int | None = None
    reason: str = ""

    def error_text(self) -> str | None:
        """What goes into the attempt history (None: nothing worth recording)."""
        return self.reason or None


class Retry(JobOutcome):
    """Try again later; consumes an attempt. ``delay_ms=None`` uses the store's default
    exponential backoff (from 1 s, capped, jittered)."""

    outcome = Outcome.RETRY

    def __init__(self, delay_ms: int | None = None, reason: str = "") -> None:
        super().__init__(delay_ms, reason)
        self.delay_ms = _delay("Retry.delay_ms", delay_ms)
        self.reason = reason

    def error_text(self) -> str:
        return self.reason or "retry requested by handler"


class Skip(JobOutcome):
    """Give up without retrying: the job is archived (the dead-letter queue)."""

    outcome = Outcome.SKIP

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason

    def error_text(self) -> str:
        return self.reason or "skipped by handler"


class Revoke(JobOutcome):
    """Drop the job entirely (the row is deleted): it should never have existed."""

    outcome = Outcome.REVOKE

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class Snooze(JobOutcome):
    """Run again after ``delay_ms`` without consuming an attempt (waiting on something
    that is not a failure, e.g. an upstream export that is not ready yet)."""

    outcome = Outcome.SNOOZE

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.delay_ms = _delay("Snooze.delay_ms", delay_ms, required=True)

    def error_text(self) -> None:
        return None


class RateLimited(JobOutcome):
    """An external system said "slow down". Moves neither attempt counter.

    With a ``rate_class`` on the job and a ``delay_ms``, the store empties that class's
    token bucket for ``delay_ms`` so the whole fleet backs off. Without a rate class the
    worker applies it as a snooze of ``delay_ms`` (default 1 s): otherwise the job would
    be available again at once and this worker would spin on it.
    """

    outcome = Outcome.RATE_LIMITED

    def __init__(self, delay_ms: int | None = None) -> None:
        super().__init__(delay_ms)
        self.delay_ms = _delay("RateLimited.delay_ms", delay_ms)

    def error_text(self) -> None:
        return None


class Throttled(JobOutcome):
    """The downstream said "too many" (an HTTP 429, a quota error): run this job again
    after ``retry_after_ms`` (default: its rate class's window) without spending an
    attempt. On an adaptive rate class the store also lowers the class's fleet-wide
    limit, at most once per window (docs/tasks.md, Throttled); on any other class, or
    none, it is a snooze."""

    outcome = Outcome.THROTTLED

    def __init__(self, retry_after_ms: int | None = None) -> None:
        super().__init__(retry_after_ms)
        self.delay_ms = _delay("Throttled.retry_after_ms", retry_after_ms)

    @property
    def retry_after_ms(self) -> int | None:
        return self.delay_ms

    def error_text(self) -> None:
        return None


class Undecodable(JobOutcome):
    """The payload can never be processed by this code; never retried."""

    outcome = Outcome.UNDECODABLE

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason

    def error_text(self) -> str:
        return self.reason or "undecodable payload"


__all__ = ["JobOutcome", "RateLimited", "Retry", "Revoke", "Skip", "Snooze", "Throttled",
           "Undecodable"]
