"""The dispatcher: the one thread that owns the hot-path writes.

Each turn it writes every ack queued since the last turn (see ``acks``), then asks the
store for at most the free capacity and hands the claims to the pool. One writer thread
per process means our own threads never busy-wait on SQLite's write lock. Between turns
it backs off on empty polls and wakes early on in-process activity, a change probe, or a
freed slot after a full poll (see ``polling``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from headgate.core import StoreUnavailable
from headgate.store.port import Store

from .acks import AckQueue
from .attempts import Inflight
from .control import Control
from .polling import Backoff, Probe
from .pool import Pool

log = logging.getLogger("headgate.worker")


class Doorbell:
    """Why the dispatcher should look again before its wait is over.

    Reasons: ``ack`` (a decision is queued), ``slot`` (a pool thread came free),
    ``activity`` (the store saw work for our queues), ``control`` (stop, resume).
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
        self, store: Store, inflight: Inflight, acks: AckQueue, pool: Pool,
        control: Control, doorbell: Doorbell, probe: Probe | None, *, worker_id: str,
        queues: Sequence[str], concurrency: int, lease_ms: int, quantum: int | None,
        poll_floor_ms: int, poll_ceiling_ms: int, probe_interval_ms: int,
        idle_probe_interval_ms: int, idle_after_ms: int, hint_ceiling_ms: int,
    ) -> None:
        self.store = store
        self.inflight = inflight
        self.acks = acks
        self.pool = pool
        self.control = control
        self.doorbell = doorbell
        self.probe = probe
        self.worker_id = worker_id
        self.queues = list(queues)
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.quantum = quantum
        self.poll_floor_ms = poll_floor_ms
        self.poll_ceiling_ms = poll_ceiling_ms
        self.probe_interval_ms = probe_interval_ms
        self.idle_probe_interval_ms = idle_probe_interval_ms
        self.idle_after_ms = idle_after_ms
        self.hint_ceiling_ms = hint_ceiling_ms
        self.polls = 0
        self.empty_polls = 0

    def free(self) -> int:
        return self.concurrency - self.inflight.busy()

    def run(self) -> None:
        halted = self.control.halted
        backoff = Backoff(self.poll_floor_ms, self.poll_ceiling_ms)
        errors = Backoff(50, 5_000)
        probe = self.probe
        busy_probe_s = self.probe_interval_ms / 1000
        idle_probe_s = max(busy_probe_s, self.idle_probe_interval_ms / 1000)
        idle_after_s = self.idle_after_ms / 1000
        hint_ceiling_s = self.hint_ceiling_ms / 1000
        hint_gap = 0.0
        last_poll = 0.0
        last_work = time.monotonic()
        saturated = False
        by_hint = False
        token: object = None
        while True:
            if not self.acks.flush():
                # The store refused the batch (unavailable): back off, keep the acks.
                self._wait(errors.next_ms() / 1000, False, None, 1.0, None, 0.0, 0.0)
                if halted.is_set() and not self.acks.give_up():
                    break
                continue
            if halted.is_set():
                break
            free = self.free()
            delay: float | None = None  # None: nothing to poll for until something wakes us
            if self.control.admitting() and free > 0:
                token = probe() if probe is not None else None
                t0 = time.monotonic()
                try:
                    claims = self.store.admit(self.worker_id, self.queues, free, self.lease_ms,
                                              self.quantum)
                except StoreUnavailable as exc:
                    log.warning("admit failed, backing off: %s", exc)
                    claims, delay = None, errors.next_ms() / 1000
                except Exception:  # noqa: BLE001 - never let the loop die
                    log.exception("admit failed unexpectedly, backing off")
                    claims, delay = None, errors.next_ms() / 1000
                if claims is not None:
                    errors.reset()
                    last_poll = time.monotonic()
                    self.polls += 1
                    if claims:
                        self.pool.submit(claims, t0 + self.lease_ms / 1000)
                        last_work = last_poll
                        backoff.reset()
                        hint_gap = 0.0
                        saturated = len(claims) >= free
                        if not saturated:
                            delay = backoff.next_ms() / 1000
                    else:
                        self.empty_polls += 1
                        saturated = False
                        delay = backoff.next_ms() / 1000
                        if by_hint:
                            hint_gap = min(hint_ceiling_s, max(hint_gap * 2, 0.001))
            probe_s = busy_probe_s if time.monotonic() - last_work < idle_after_s \
                else idle_probe_s
            by_hint = self._wait(delay, saturated, probe, probe_s, token, last_poll, hint_gap)

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
            use_probe = probe is not None and can_admit and delay is not None
            if self.doorbell.wait(min(remaining, probe_s) if use_probe else remaining):
                reasons = self.doorbell.take()
                if "control" in reasons or "ack" in reasons:
                    return False
                if "activity" in reasons and can_admit:
                    return False
                # A freed slot is worth an early poll only if the last poll filled every
                # slot (work is probably waiting) or we were not polling at all.
                if "slot" in reasons and (saturated or delay is None):
                    return False
                continue
            if use_probe and probe() != token and time.monotonic() - last_poll >= hint_gap:
                return True
        return False
