"""Whether a worker admits, drains or has stopped, and the status it reports.

One object answers that for every thread: the dispatcher asks ``admitting()`` before
each poll, the heartbeat reports ``status``, and ``Worker.stop``, Ctrl-C and operator
signals change it. Threads that must react at once to a change (the dispatcher, the
heartbeat) register with ``listen``.

Statuses: running, quiet, stopping (terminate / SIGTERM), restarting, stopped. The
registry row is kept on exit with status ``stopped`` rather than deleted, so the
dashboard can show that a worker left cleanly; stale-worker aging forgets it later.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

EXIT_OK = 0
# EX_TEMPFAIL from sysexits.h: "try again" — a supervisor should start a fresh process.
EXIT_RESTART = 75
# A second SIGTERM/SIGINT during the drain: released what it could, then left.
EXIT_FORCED = 1

STATUS_RUNNING = "running"
STATUS_QUIET = "quiet"
STATUS_STOPPING = "stopping"
STATUS_RESTARTING = "restarting"
STATUS_STOPPED = "stopped"


class Control:
    """The stop sequence's milestones, in order: ``stop_requested`` (admit nothing
    more), ``stopping`` (the drain began), ``halted`` (background threads end),
    ``stopped`` (the last heartbeat is about to say so)."""

    def __init__(self) -> None:
        self.quiet = False
        self.stop_requested = threading.Event()
        self.stopping = threading.Event()
        self.halted = threading.Event()
        self.stopped = False
        self.stop_status = STATUS_STOPPING
        self.exit_code = EXIT_OK
        self._listeners: list[Callable[[], None]] = []

    def listen(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def changed(self) -> None:
        for callback in list(self._listeners):
            callback()

    def request_stop(self, code: int, status: str) -> None:
        """The first request decides the exit code and status; later ones change nothing."""
        if self.stop_requested.is_set():
            return
        self.exit_code = code
        self.stop_status = status
        self.stop_requested.set()
        self.changed()

    def admitting(self) -> bool:
        return not self.quiet and not self.stop_requested.is_set()

    @property
    def status(self) -> str:
        if self.stopped:
            return STATUS_STOPPED
        if self.stopping.is_set() or self.stop_requested.is_set():
            return self.stop_status
        return STATUS_QUIET if self.quiet else STATUS_RUNNING
