"""Keeping leases: batched renewal, per-attempt time limits, handing jobs back.

One thread renews every in-flight lease in one ``store.renew`` call every
``lease_ms / 3`` and, between renewals, enforces timeouts and deadlines. Attempts whose
ack is still queued are renewed too: under load or a store hiccup the ack may wait, and
the lease must not run out meanwhile.

A lease that could not be renewed until its expiry is treated as lost: the handler is
cancelled and the job handed back with ``release`` (a no-op if someone else already
reclaimed it), so a store outage is not charged as a crash when that is avoidable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait as wait_for_exit

from headgate.core import Claim, Outcome, StoreUnavailable
from headgate.store.port import Admission

from .attempts import (
    DEADLINE,
    LEASE_EXPIRED,
    NOT_OURS,
    RELEASED,
    TIMED_OUT,
    Attempt,
    Inflight,
    lock_order,
)
from .execution import Decision

log = logging.getLogger("headgate.worker")


class LeaseKeeper:
    def __init__(self, store: Admission, inflight: Inflight, *, lease_ms: int,
                 timeout_grace_ms: int, kill_grace_ms: int, halted: threading.Event,
                 record: Callable[[Attempt, Decision], object]) -> None:
        self.store = store
        self.inflight = inflight
        self.lease_ms = lease_ms
        self.timeout_grace_ms = timeout_grace_ms
        self.kill_grace_ms = kill_grace_ms
        self.halted = halted
        self.record = record
        self._wake = threading.Event()

    def wake(self) -> None:
        self._wake.set()

    def run(self) -> None:
        interval = max(self.lease_ms / 3000, 0.01)
        next_renew = time.monotonic() + interval
        while not self.halted.is_set():
            now = time.monotonic()
            self._enforce_time_limits(now)
            if now >= next_renew:
                ok = self._renew()
                next_renew = now + (interval if ok else min(interval, 0.5))
            # Nothing in flight: nothing to time out, so sleep longer; an attempt with a
            # time limit wakes us when it starts, renewals keep their own schedule.
            tick = 0.05 if self.inflight.all() else 1.0
            wait = min(tick, max(0.0, next_renew - time.monotonic()))
            self._wake.wait(wait)
            self._wake.clear()

    def _enforce_time_limits(self, now: float) -> None:
        for attempt in self.inflight.unsettled():
            gate = attempt.gate
            if attempt.timeout_at is not None and now >= attempt.timeout_at \
                    and gate.cancel(TIMED_OUT):
                attempt.cancelled_at = now
                log.warning("job %s %s: timed out after %d ms; cancelling", attempt.job.id,
                            attempt.job.kind, attempt.timeout_ms)
            if attempt.deadline_at is not None and now >= attempt.deadline_at \
                    and gate.cancel(DEADLINE):
                attempt.cancelled_at = now
                log.warning("job %s %s: deadline reached while running; cancelling",
                            attempt.job.id, attempt.job.kind)
            if (
                gate.reason in (TIMED_OUT, DEADLINE) and not attempt.isolated
                and attempt.cancelled_at is not None and not attempt.thread_done
                and now >= attempt.cancelled_at + self.timeout_grace_ms / 1000
            ):
                log.error("job %s %s: handler ignored cancellation for %d ms; recording the "
                          "attempt now, its thread stays busy until the handler returns",
                          attempt.job.id, attempt.job.kind, self.timeout_grace_ms)
                threading.Thread(target=self.record, args=(attempt, Decision(Outcome.RETRY)),
                                 daemon=True).start()
            if now > attempt.lease_ok_until and attempt.settle():
                # Renewals kept failing: another worker may own the job by now. Stop the
                # handler; hand the job back in case nobody reclaimed it yet (a no-op
                # for the store otherwise), so the outage is not charged as a crash.
                attempt.gate.close(LEASE_EXPIRED)
                log.warning("job %s %s: %s; handler cancelled, outcome will be discarded",
                            attempt.job.id, attempt.job.kind, LEASE_EXPIRED)
                threading.Thread(target=self.release, args=([attempt], 0.0, True),
                                 daemon=True).start()

    def _renew(self) -> bool:
        live = sorted((a for a in self.inflight.all() if not a.finished and not a.gate.closed),
                      key=lock_order)
        if not live:
            return True
        started = time.monotonic()
        try:
            lost = {(c.job.id, c.fence) for c in self.store.renew([a.claim for a in live],
                                                                  self.lease_ms)}
        except Exception as exc:  # noqa: BLE001 - StoreUnavailable and friends
            log.warning("lease renewal failed (%d job(s)): %s", len(live), exc)
            return False
        until = started + self.lease_ms / 1000
        for attempt in live:
            if attempt.key in lost:
                if not attempt.settled:  # a queued ack learns it from the store itself
                    self.inflight.abandon(attempt, NOT_OURS)
            else:
                attempt.lease_ok_until = until
        return True

    def release(self, attempts: list[Attempt], retry_for_s: float,
                already_settled: bool = False) -> int:
        """Hand unfinished attempts back to the store without charging them; returns
        how many were released (0 when the store refused)."""
        mine = []
        for attempt in sorted(attempts, key=lock_order):
            # Settle first: if the handler just finished, its ack wins and we leave it.
            if already_settled or attempt.settle():
                attempt.gate.close(RELEASED)
                mine.append(attempt)
        if not mine:
            return 0
        self._end_children(mine)
        released = len(mine) if self.give_back([a.claim for a in mine], retry_for_s) else 0
        for attempt in mine:
            self.inflight.done_with(attempt)
        return released

    def _end_children(self, attempts: list[Attempt]) -> None:
        """Wait until the isolated children of closed attempts are gone (their parent
        loops send SIGTERM, then SIGKILL after the grace): a job handed back while its
        child still runs could run twice at once, here and on whoever takes it next."""
        # Their sentinels, not join(): the pool thread reaps the child, and a second
        # waitpid would make a dead child look alive.
        children = {a.process.sentinel: a.process for a in attempts if a.process is not None}
        deadline = time.monotonic() + self.kill_grace_ms / 1000 + 1.0
        while children and time.monotonic() < deadline:
            for ended in wait_for_exit(list(children), deadline - time.monotonic()):
                children.pop(ended)
        for process in children.values():
            process.kill()
        if children:
            wait_for_exit(list(children), 1.0)

    def give_back(self, claims: list[Claim], retry_for_s: float) -> bool:
        """``store.release``, retried while the store is unavailable; False when it
        could not be done (the leases then expire and are charged as crashes)."""
        give_up = time.monotonic() + retry_for_s
        while True:
            try:
                self.store.release(claims)
                return True
            except StoreUnavailable as exc:
                if time.monotonic() >= give_up:
                    log.error("release of %d job(s) failed: %s; their leases will expire",
                              len(claims), exc)
                    return False
                time.sleep(0.1)
            except Exception as exc:  # noqa: BLE001
                log.error("release of %d job(s) failed: %s", len(claims), exc)
                return False
