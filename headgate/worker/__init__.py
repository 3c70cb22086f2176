"""The worker runtime (SPEC §8): ``Worker``, handler outcomes, the job context."""

from .context import JobContext
from .decoders import JsonDecoder
from .outcomes import JobOutcome, RateLimited, Retry, Revoke, Skip, Snooze, Undecodable
from .runtime import (
    DEADLINE_HEADER,
    EXIT_FORCED,
    EXIT_OK,
    EXIT_RESTART,
    HandlerSpec,
    Worker,
)

__all__ = [
    "DEADLINE_HEADER", "EXIT_FORCED", "EXIT_OK", "EXIT_RESTART", "HandlerSpec", "JobContext",
    "JobOutcome", "JsonDecoder", "RateLimited", "Retry", "Revoke", "Skip", "Snooze",
    "Undecodable", "Worker",
]
