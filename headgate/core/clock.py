"""The process's wall clock in epoch milliseconds, truncated like the stores' clocks
(`headgate_now_ms()` on PostgreSQL), so a time read here and one read in the store never
differ by a rounding."""

from __future__ import annotations

import time


def wall_ms() -> int:
    return time.time_ns() // 1_000_000
