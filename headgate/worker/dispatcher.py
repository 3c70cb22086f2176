"""The dispatcher: the one thread that owns the hot-path writes.

Each turn writes every ack queued since the last turn (see ``acks``) and asks the store
for at most the free capacity, handing the claims to the pool. When there are acks AND
free slots, both happen in one transaction (``store.ack_and_admit``): a busy worker's
steady state — finish a few, take a few — costs one commit instead of two. Otherwise,
or with a store that lacks the combined call, the acks go alone (``ack_many``), then
admission (``admit``). One writer thread per process means our own threads never
busy-wait on SQLite's write lock.

Free capacity is idle pool threads. A pool thread frees its slot before it queues its
ack, so the slots of a batch's acks are already counted when the batch is written; a
handler stuck past its timeout grace (its ack queued by the lease keeper) still holds
its thread and is not counted. Admitting at most that many never runs more handlers
than ``concurrency``.

Between turns it backs off on empty polls and wakes early on in-process activity, a
change probe, or a freed slot after a full poll (see ``polling``). Woken by an ack while
other handlers run, it lingers briefly when attempts are typically shorter than a turn
(``_linger``), so handlers dispatched together have their acks written together.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from headgate.core import Claim, StoreUnavailable
from headgate.store.port import Admission

from .acks import AckQueue, Queued
from .attempts import Inflight
from .polling import Backoff, Probe
from .pool import Pool
from .run_state import Control

log = logging.getLogger("headgate.worker")

class Doorbell:
    """Why the dispatcher should look again before its wait is over.

    Reasons: ``ack`` (a decision is queued), ``slot`` (a pool thread came free without
    queueing an ack), ``activity`` (the store saw work for our queues), ``control``
    (stop, resume).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: set[str] = set()
        self._event = threading.Event()

    def ring(self, reason: str) -> None:
        with self._lock:
            self._reasons.add(reason)
        self._event.set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)

    def take(self) -> set[str]:
        self._event.clear()  # before taking: a ring in between sets it again
        with self._lock:
            reasons, self._reasons = self._reasons, set()
        return reasons


class Dispatcher:
    def __init__(
        self, store: Admission, inflight: Inflight, acks: AckQueue, pool: Pool,
        control: Control, doorbell: Doorbell, probe: Probe | None,
        give_back: Callable[[list[Claim], float], bool], *, worker_id: str,
        queues: Sequence[str], concurrency: int, lease_ms: int, quantum: int | None,
        poll_floor_ms: int, poll_ceiling_ms: int, probe_interval_ms: int,
        idle_probe_interval_ms: int, idle_after_ms: int, hint_ceiling_ms: int,
    ) -> None:
        self.store = store
        self.inflight = inflight
        self.acks = acks
        self.pool = pool
        self.give_back = give_back
        # Held while claims go to the pool; ``Engine.shutdown`` starts the drain under it,
        # so claims are either in flight when the drain looks, or handed back.
        self.handoff = threading.Lock()
        self.control = control
        self.doorbell = doorbell
        self.probe = probe
        self.worker_id = worker_id
        self.queues = list(queues)
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.quantum = quantum
        self.busy_probe_s = probe_interval_ms / 1000
        self.idle_probe_s = max(self.busy_probe_s, idle_probe_interval_ms / 1000)
        self.idle_after_s = idle_after_ms / 1000
        self.hint_ceiling_s = hint_ceiling_ms / 1000
        self.polls = 0
        self.empty_polls = 0
        self._backoff = Backoff(poll_floor_ms, poll_ceiling_ms)
        self._errors = Backoff(50, 5_000)
        # What the last turn decided about the next wait (see ``_wait``).
        self._delay: float | None = None  # None: nothing to poll for until woken
        self._saturated = False  # the last poll filled every free slot
        self._token: object = None  # the change probe's value before the last poll
        self._by_hint = False  # the change probe ended the last wait
        self._hint_gap = 0.0
        self._last_poll = 0.0
        self._last_work = time.monotonic()
        self._turn_s = 0.0  # how long the last store call took

    def free(self) -> int:
        return self.concurrency - self.inflight.busy()

    def run(self) -> None:
        halted = self.control.halted
        while True:
            self._delay = None
            if not self._turn():
                # The store refused the acks (unavailable): back off, keep them queued.
                self._wait(self._errors.next_ms() / 1000, False, None, 1.0, None, 0.0, 0.0)
                if halted.is_set() and not self.acks.give_up():
                    break
                continue
            if halted.is_set():
                break
            probe_s = self.busy_probe_s if time.monotonic() - self._last_work < \
                self.idle_after_s else self.idle_probe_s
            self._by_hint = self._wait(self._delay, self._saturated, self.probe, probe_s,
                                       self._token, self._last_poll, self._hint_gap)

    def _admitting(self, free: int) -> bool:
        return free > 0 and self.control.admitting() and not self.control.halted.is_set()

    def _turn(self) -> bool:
        """Write the queued acks and admit for the free slots; False when the acks
        could not be written (nothing is admitted then)."""
        batch = self.acks.take()
        free = self.free()
        if batch and self._admitting(free):
            done = self._combined(batch, free)
            if done is not None:
                return done
        if not self.acks.write(batch):
            return False
        free = self.free()
        if self._admitting(free):
            self._admit(free)
        return True

    def _combined(self, batch: list[Queued], free: int) -> bool | None:
        """Ack the batch and admit in one transaction: True when done, False when the
        store was unavailable, None when the caller should do both separately."""
        self._take_token()
        started = time.monotonic()
        try:
            lost, claims = self.store.ack_and_admit(
                self.acks.requests(batch), self.worker_id, self.queues, free, self.lease_ms,
                self.quantum)
        except StoreUnavailable as exc:
            self.acks.refused(batch, exc)
            return False
        except Exception as exc:  # noqa: BLE001 - e.g. an invalid outcome rolled it all back
            log.warning("combined ack and admit failed (%s); doing them separately", exc)
            return None
        self.acks.settle(batch, lost)
        self._polled(claims, free, started)
        return True

    def _take_token(self) -> None:
        """The change probe's value before a poll, for the wait after it. After a poll
        that filled every slot the wait is for our own slots, not the probe, so while
        polls keep filling them the read is skipped: a drain then spends nothing on it,
        and a poll that comes up short without a token costs one early poll at most."""
        self._token = self.probe() if self.probe is not None and not self._saturated else None

    def _admit(self, free: int) -> None:
        self._take_token()
        started = time.monotonic()
        try:
            claims = self.store.admit(self.worker_id, self.queues, free, self.lease_ms,
                                      self.quantum)
        except StoreUnavailable as exc:
            log.warning("admit failed, backing off: %s", exc)
            self._delay = self._errors.next_ms() / 1000
            return
        except Exception:  # noqa: BLE001 - never let the loop die
            log.exception("admit failed unexpectedly, backing off")
            self._delay = self._errors.next_ms() / 1000
            return
        self._polled(claims, free, started)

    def _polled(self, claims: list[Claim], free: int, started: float) -> None:
        """Hand the claims to the pool and decide how long to wait before the next poll."""
        self._errors.reset()
        self._last_poll = time.monotonic()
        self._turn_s = self._last_poll - started
        self.polls += 1
        if claims and not self._hand_over(claims, started + self.lease_ms / 1000):
            return
        if claims:
            self._last_work = self._last_poll
            self._backoff.reset()
            self._hint_gap = 0.0
            self._saturated = len(claims) >= free
            if not self._saturated:
                self._delay = self._backoff.next_ms() / 1000
        else:
            self.empty_polls += 1
            self._saturated = False
            self._delay = self._backoff.next_ms() / 1000
            if self._by_hint:
                self._hint_gap = min(self.hint_ceiling_s, max(self._hint_gap * 2, 0.001))

    def _hand_over(self, claims: list[Claim], lease_ok_until: float) -> bool:
        """Give the claims to the pool; False when the drain began while the store
        admitted them: they go back to available, uncharged, instead."""
        with self.handoff:
            if not self.control.stopping.is_set():
                self.pool.submit(claims, lease_ok_until)
                return True
        log.info("worker %s: %d job(s) admitted as the drain began; released",
                 self.worker_id, len(claims))
        self.give_back(claims, 5.0)
        return False

    def _linger(self) -> None:
        """After an ack, wait a moment for the handlers still running when attempts are
        typically shorter than a store turn: handlers dispatched together then finish
        within that moment, and one turn writes all their acks and refills all their
        slots, where waking on the first ack would write each in a turn of its own (a
        turn costs about the same for one ack as for several). Longer handlers end at
        unrelated times and are not waited for; the wait never exceeds one typical
        attempt, itself shorter than a turn."""
        typical = self.pool.typical_s
        if typical <= 0 or typical > self._turn_s:
            return
        deadline = time.monotonic() + typical
        while self.inflight.busy() > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.doorbell.wait(remaining):
                return
            if "control" in self.doorbell.take():
                return

    def _wait(self, delay: float | None, saturated: bool, probe: Probe | None,
              probe_s: float, token: object, last_poll: float, hint_gap: float) -> bool:
        """Sleep until the next poll is due or worth doing early; True when the change
        probe (not the clock or an explicit wake-up) ended the wait."""
        until = time.monotonic() + (delay if delay is not None else 1.0)
        while not self.control.halted.is_set():
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            can_admit = self.control.admitting() and self.free() > 0
            # The probe when it may end this wait early, else None.
            early = probe if can_admit and delay is not None else None
            if self.doorbell.wait(min(remaining, probe_s) if early is not None else remaining):
                reasons = self.doorbell.take()
                if "control" in reasons:
                    return False
                if "ack" in reasons:
                    self._linger()
                    return False
                if "activity" in reasons and can_admit:
                    return False
                # A freed slot is worth an early poll only if the last poll filled every
                # slot (work is probably waiting) or we were not polling at all.
                if "slot" in reasons and (saturated or delay is None):
                    return False
                continue
            if early is not None and early() != token and time.monotonic() - last_poll >= hint_gap:
                return True
        return False
