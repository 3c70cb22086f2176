"""Finished jobs on PostgreSQL, announced coalesced.

A plain ack is one statement of the admit function and sends no NOTIFY: a NOTIFY in
the ack's transaction would take PostgreSQL's notification-queue lock at every commit of
every worker, and a drain commits hundreds of times a second. Yet live views (SSE
`/api/v1/events`, the console's fragments) must hear completions and failures. So each
store gathers the queues its acks touched and announces them from a thread of its own:
the first after a quiet spell at once, then at most one announcement per `window_s` —
one NOTIFY (through the store's Notifier) and one in-process signal, whatever the
number of jobs. The ack path only adds names to a set.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

WINDOW_S = 0.2  # at most five announcements a second per store; well inside a second


class FinishedAnnouncer:
    def __init__(self, announce: Callable[[frozenset[str]], None],
                 window_s: float = WINDOW_S) -> None:
        self._announce = announce
        self.window_s = window_s
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def finished(self, queues: Iterable[str]) -> None:
        """Called after an ack batch committed: its queues will be announced."""
        with self._lock:
            before = len(self._pending)
            self._pending.update(queues)
            if len(self._pending) == before:
                return
            if self._thread is None and not self._stop.is_set():
                # Started by the first ack: producers and views never need it.
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="headgate-finished")
                self._thread.start()
        self._wake.set()

    def _take(self) -> frozenset[str]:
        with self._lock:
            names, self._pending = frozenset(self._pending), set()
        return names

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            names = self._take()
            if names:
                self._announce(names)
            # Coalesce whatever finishes in the next window into one announcement.
            self._stop.wait(self.window_s)

    def close(self) -> None:
        """Announce what is still pending (a short-lived process's last acks), stop."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        names = self._take()
        if names:
            self._announce(names)
