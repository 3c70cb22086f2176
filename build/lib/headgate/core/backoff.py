"""Default retry backoff: exponential from 1 s, capped, with jitter."""

from __future__ import annotations

import random

BASE_MS = 1_000
CAP_MS = 3_600_000


def retry_delay_ms(attempt: int) -> int:
    """Delay before the attempt after `attempt` failed ones (attempt >= 1)."""
    exp = min(CAP_MS, BASE_MS * (2 ** max(0, min(attempt - 1, 32))))
    return int(exp * random.uniform(0.75, 1.25))
