"""Background duties a worker process can carry (SPEC §6): reclaimer and promoter.

Each duty runs under a singleton duty lease in the store, claimed (compare-and-set on
store time) before every tick, so any number of workers and servers on one database
run it once. A holder that dies simply stops renewing and another takes over after the
TTL.

This is deliberately a plain interval thread behind a small interface
(``DutyRunner.run_duty(name, fn)``): the periodic-scheduler work replaces it with an
APScheduler-based runner shared with ``headgate serve``, and the worker only talks to
the interface.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from headgate.store.port import Store

log = logging.getLogger("headgate.duties")

DEFAULT_INTERVAL_MS = 1_000
DEFAULT_RESIGN_COOLDOWN_MS = 60_000


class DutyRunner(Protocol):
    def run_duty(self, name: str, fn: Callable[[], object], interval_ms: int | None = None
                 ) -> None: ...

    def start(self) -> None: ...

    def resign(self, cooldown_ms: int = DEFAULT_RESIGN_COOLDOWN_MS) -> None: ...

    def stop(self) -> None: ...


@dataclass
class _Duty:
    name: str
    fn: Callable[[], object]
    interval_s: float
    next_at: float = 0.0
    held: bool = False


class IntervalDutyRunner:
    """One daemon thread ticking every registered duty at its interval.

    The lease TTL is three intervals: one missed tick (a slow transaction, a locked
    database) does not hand the duty over, a dead holder is replaced within seconds.
    """

    def __init__(self, store: Store, holder: str, interval_ms: int = DEFAULT_INTERVAL_MS
                 ) -> None:
        self.store = store
        self.holder = holder
        self.interval_ms = interval_ms
        self._duties: list[_Duty] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._resigned_until = 0.0

    def run_duty(self, name: str, fn: Callable[[], object], interval_ms: int | None = None
                 ) -> None:
        interval = (interval_ms or self.interval_ms) / 1000
        with self._lock:
            self._duties.append(_Duty(name, fn, interval))

    def start(self) -> None:
        if self._thread is None and self._duties:
            self._thread = threading.Thread(target=self._run, name="headgate-duties",
                                            daemon=True)
            self._thread.start()

    def resign(self, cooldown_ms: int = DEFAULT_RESIGN_COOLDOWN_MS) -> None:
        """Step down from every duty lease and do not compete for ``cooldown_ms``, so
        another process takes over; afterwards this one competes again like any other
        (a lone worker that resigned does not leave the fleet without duties forever)."""
        with self._lock:
            self._resigned_until = time.monotonic() + cooldown_ms / 1000
        self._release_all()
        log.info("duties: %s resigned for %d ms", self.holder, cooldown_ms)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._release_all()

    def held(self) -> list[str]:
        with self._lock:
            return [d.name for d in self._duties if d.held]

    def _release_all(self) -> None:
        with self._lock:
            duties = list(self._duties)
        for duty in duties:
            if not duty.held:
                continue
            try:
                self.store.release_duty(duty.name, self.holder)
                duty.held = False
            except Exception as exc:  # noqa: BLE001 - best effort; the TTL covers it
                log.warning("duty %s: release failed: %s", duty.name, exc)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                duties = list(self._duties)
                resigned = now < self._resigned_until
            for duty in duties:
                if self._stop.is_set():
                    break
                if resigned or now < duty.next_at:
                    continue
                duty.next_at = now + duty.interval_s
                self._tick(duty)
            with self._lock:
                nearest = min((d.next_at for d in self._duties), default=now + 1)
            self._wake.wait(max(0.005, nearest - time.monotonic()))
            self._wake.clear()

    def _tick(self, duty: _Duty) -> None:
        ttl_ms = max(1_000, int(duty.interval_s * 3000))
        try:
            duty.held = self.store.claim_duty(duty.name, self.holder, ttl_ms)
        except Exception as exc:  # noqa: BLE001 - e.g. a locked database: try next tick
            log.warning("duty %s: claim failed: %s", duty.name, exc)
            return
        if not duty.held:
            return
        try:
            done = duty.fn()
            if done:
                log.info("duty %s: %s", duty.name, done)
        except Exception:  # noqa: BLE001 - a failing duty must not kill the thread
            log.exception("duty %s failed", duty.name)


def standard_duties(store: Store) -> list[tuple[str, Callable[[], object]]]:
    """What ``headgate worker --duties`` runs: recover expired leases, promote due jobs."""
    return [("reclaimer", store.reclaim_expired), ("promoter", store.promote_due)]
