"""What both engines' admission shares: how far one call scans and promotes (SQLite's
admission.py and PostgreSQL's admit function take these as arguments), the arguments
every admit accepts, and the token bucket's rule as reads (inspection, explanations)
see it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from headgate.core.errors import InvalidInput

SCAN_BATCH_EXTRA = 16
MAX_SCAN_PER_PARTITION = 1000
PROMOTE_PER_ADMIT = 1000  # due jobs an admit makes available at most


def validate_admit_args(
    worker_id: str, queues: Sequence[str], capacity: int, lease_ms: int, quantum: int | None
) -> None:
    if not isinstance(worker_id, str) or not worker_id:
        raise InvalidInput("worker_id must not be empty")
    if isinstance(queues, str) or not queues or not all(isinstance(q, str) for q in queues):
        raise InvalidInput("queues must be a non-empty list of queue names")
    for name, value, low in (("capacity", capacity, 0), ("lease_ms", lease_ms, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidInput(f"{name} must be an integer >= {low}")
    if quantum is not None and (isinstance(quantum, bool) or not isinstance(quantum, int)
                                or quantum < 1):
        raise InvalidInput("quantum must be an integer >= 1")


@dataclass(slots=True)
class RateBucket:
    """A token bucket refilled by store time; `limit` tokens per `window_ms`."""

    limit: int
    window_ms: int
    burst: int
    paused: bool
    tokens: float
    dirty: bool = False

    @classmethod
    def load(cls, row: tuple, now: int) -> RateBucket:
        limit, window_ms, burst, paused, tokens, refilled_at = row
        elapsed = max(0, now - refilled_at)
        tokens = min(float(burst), tokens + elapsed * limit / window_ms)
        # A store clock that stepped back (NTP; on SQLite a writer whose clock ran
        # ahead) mints nothing, and `dirty` writes `now` back as the refill instant:
        # otherwise the class would earn nothing until the clock caught up again.
        return cls(limit, window_ms, burst, bool(paused), tokens, dirty=now < refilled_at)

    def refill_in_ms(self, weight: int) -> int:
        missing = weight - self.tokens
        if missing <= 0:
            return 0
        return math.ceil(missing * self.window_ms / self.limit)
