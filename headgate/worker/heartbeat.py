"""The registry heartbeat, and the operator signals and cancels its reply carries.

Every ``heartbeat_ms`` (and at once after a status change, so operators see it
promptly) the worker upserts its registry row with the ids of its unsettled jobs. The
reply names a pending signal (delivered once) and which of those jobs an operator
cancelled; a cancel abandons the attempt, because the store already ended the job.

``resign`` steps down from duty leases for ``resign_cooldown_ms`` (60 s), then this
worker competes again — so a lone worker cannot leave the fleet without a reclaimer.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

from headgate.core.records import WorkerBeat
from headgate.services.streak import FailureStreak
from headgate.store.port import Admission

from .attempts import NOT_OURS, Inflight
from .run_state import EXIT_OK, EXIT_RESTART, STATUS_RESTARTING, STATUS_STOPPING, Control

log = logging.getLogger("headgate.worker")

HOST = socket.gethostname()


def default_worker_id() -> str:
    """``host:pid:random``: readable in the dashboard, unique across restarts."""
    return f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Heartbeat:
    def __init__(self, store: Admission, inflight: Inflight, control: Control, *,
                 worker_id: str, interval_ms: int, row: Callable[[], WorkerBeat],
                 resign: Callable[[], None] | None) -> None:
        self.store = store
        self.inflight = inflight
        self.control = control
        self.worker_id = worker_id
        self.interval_ms = interval_ms
        self.row = row
        self.resign = resign
        self._wake = threading.Event()
        self._failures = FailureStreak()

    def wake(self) -> None:
        self._wake.set()

    def run(self) -> None:
        while not self.control.halted.is_set():
            self.beat()
            self._wake.wait(self.interval_ms / 1000)
            self._wake.clear()

    def beat(self) -> None:
        snapshot = {a.key: a for a in self.inflight.unsettled()}
        try:
            reply = self.store.heartbeat(self.row(), [a.claim for a in snapshot.values()])
        except Exception as exc:  # noqa: BLE001 - keep beating; the store may come back
            if self._failures.failed():
                log.warning("heartbeat failed (%d in a row): %s", self._failures.failures, exc)
            return
        if failures := self._failures.succeeded():
            log.info("heartbeat works again after %d failures", failures)
        for claim in reply.cancelled:
            attempt = snapshot.get((claim.job.id, claim.fence))
            if attempt is not None and not attempt.settled:
                self.inflight.abandon(attempt, NOT_OURS)
        signal = reply.signal
        if signal and not self.control.stopped:
            self._apply_signal(signal)

    def _apply_signal(self, signal: str) -> None:
        log.info("worker %s: operator signal %s", self.worker_id, signal)
        control = self.control
        if signal == "quiet":
            control.quiet = True
        elif signal == "resume":
            control.quiet = False
            control.changed()
        elif signal == "restart":
            control.request_stop(EXIT_RESTART, STATUS_RESTARTING)
        elif signal == "terminate":
            control.request_stop(EXIT_OK, STATUS_STOPPING)
        elif signal == "resign":
            if self.resign is not None:
                self.resign()
        else:
            log.warning("worker %s: unknown signal %r ignored", self.worker_id, signal)
        self.wake()  # acknowledge the new status at once
