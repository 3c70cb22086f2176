"""Consecutive failures of one kind, for logging them without flooding the log.

A store outage makes every periodic call fail (heartbeats, duty ticks) until it ends.
Logged once per call that would be a line every second or two from every worker and
duty; logged per streak it is the first failure, a reminder a minute with the count,
and the recovery.
"""

from __future__ import annotations

import time

REPORT_EVERY_S = 60.0


class FailureStreak:
    def __init__(self, report_every_s: float = REPORT_EVERY_S) -> None:
        self.report_every_s = report_every_s
        self.failures = 0
        self._reported_at = 0.0

    def failed(self) -> bool:
        """Count a failure; True when this one should be logged."""
        self.failures += 1
        now = time.monotonic()
        if self.failures == 1 or now - self._reported_at >= self.report_every_s:
            self._reported_at = now
            return True
        return False

    def succeeded(self) -> int:
        """End the streak; how many failures it held (0: there was none)."""
        failures, self.failures = self.failures, 0
        return failures
