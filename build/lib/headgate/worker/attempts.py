"""The claims this process is working on, and how each one ends exactly once.

An attempt ends in exactly one of: an ack (the outcome), a release (shutdown: back to
available, nothing charged), or abandonment (the store says it is no longer ours:
lease lost or operator cancel — the store already decided its fate, so we write
nothing). Several threads can reach an end at the same moment (the handler returns as
the lease keeper times it out, the heartbeat delivers a cancel, shutdown releases), so
``Attempt.settle`` lets exactly one of them choose.

An attempt leaves the table only when nothing more will be written for it AND its pool
thread is free: a handler that ignored its timeout keeps its thread, and so its slot,
after its attempt was recorded.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from headgate.core import Claim

from .handlers import HandlerSpec
from .job_context import AttemptGate, JobContext, LogCapture

log = logging.getLogger("headgate.worker")

# Why an attempt was cancelled or closed (its gate's reason; the handler sees it).
TIMED_OUT = "timed out"
DEADLINE = "deadline exceeded"
NOT_OURS = "no longer running in the store (operator cancel or lease lost)"
LEASE_EXPIRED = "lease expired while the store was unreachable"
RELEASED = "released at shutdown"


class Attempt:
    """One claim being worked on by this process."""

    def __init__(self, claim: Claim, spec: HandlerSpec | None, lease_ok_until: float) -> None:
        self.claim = claim
        self.job = claim.job
        self.spec = spec
        self.gate = AttemptGate()
        self.capture: LogCapture | None = None
        self.ctx: JobContext | None = None
        self.started = time.monotonic()
        self.timeout_at: float | None = None
        self.timeout_ms: int | None = None
        self.deadline_at: float | None = None
        self.cancelled_at: float | None = None
        self.lease_ok_until = lease_ok_until
        self.isolated = False
        self.process: Any = None
        self.thread_done = False
        self.settled = False  # its end is decided (ack queued, abandoned or released)
        self.finished = False  # ...and carried out: nothing more will be written
        self.acking = False
        self._lock = threading.Lock()

    @property
    def key(self) -> tuple[str, int]:
        return (self.job.id, self.claim.fence)

    def settle(self) -> bool:
        """Claim the right to end this attempt; True for exactly one caller."""
        with self._lock:
            if self.settled:
                return False
            self.settled = True
            return True


def lock_order(attempt: Attempt) -> tuple[str, int]:
    """The order in which this process hands job rows to the store.

    Acks (dispatcher), renewals (lease keeper) and releases run in different threads;
    acks queue in the order handlers finish, renewals would go in dispatch order. A
    store that locks rows in the order given (PostgreSQL row locks) would let two of our
    own transactions deadlock. The SQL adapter sorts them itself, but the port does not
    promise it, so every batch leaves here in one order.
    """
    return attempt.key


class Inflight:
    """The attempts this process holds, and how many pool threads they occupy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: dict[tuple[str, int], Attempt] = {}
        self._busy = 0

    def add(self, attempt: Attempt) -> None:
        """A dispatched attempt takes a pool thread from now until ``thread_free``."""
        with self._lock:
            self._table[attempt.key] = attempt
            self._busy += 1

    def busy(self) -> int:
        with self._lock:
            return self._busy

    def thread_free(self, attempt: Attempt) -> None:
        with self._lock:
            attempt.thread_done = True
            self._busy -= 1
            if attempt.finished:
                self._table.pop(attempt.key, None)

    def done_with(self, attempt: Attempt) -> None:
        """Nothing more will be written for this attempt; drop it once its thread is
        free too."""
        with self._lock:
            attempt.finished = True
            attempt.acking = False
            if attempt.thread_done:
                self._table.pop(attempt.key, None)

    def all(self) -> list[Attempt]:
        with self._lock:
            return list(self._table.values())

    def unsettled(self) -> list[Attempt]:
        return [a for a in self.all() if not a.settled]

    def count(self) -> int:
        """Attempts not finished yet (what the registry row calls in-flight)."""
        with self._lock:
            return sum(1 for a in self._table.values() if not a.finished)

    def abandon(self, attempt: Attempt, reason: str) -> None:
        """The store no longer lets this attempt write: tell the handler, write nothing."""
        attempt.gate.close(reason)
        if attempt.settle():
            log.warning("job %s %s: %s; handler cancelled, its outcome will be discarded",
                        attempt.job.id, attempt.job.kind, reason)
            self.done_with(attempt)
