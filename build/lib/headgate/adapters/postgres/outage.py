"""Failing fast while the PostgreSQL server is down.

When the server goes away the pool discards its connections, and every later checkout
waits the pool's whole timeout (10 s) for a connection that cannot be made, while the
pool logs each failed attempt: an API request, a console page or a worker's heartbeat
each hang that long before answering 503. So the first call that fails tries one direct
connection of its own; if that fails too, the server is marked down, and until it
answers again calls fail at once with the error it gave. One caller each half second
(not one per call) tries again, outside the pool, and the first success lets everyone
through.
"""

from __future__ import annotations

import threading
import time

import psycopg
import psycopg_pool

from headgate.core import StoreUnavailable

RECHECK_S = 0.5
CONNECT_TIMEOUT_S = 2
# admin_shutdown, crash_shutdown, cannot_connect_now
ADMIN_SHUTDOWN = ("57P01", "57P02", "57P03")


class Reachability:
    def __init__(self, url: str, *, recheck_s: float = RECHECK_S) -> None:
        self.url = url
        self.recheck_s = recheck_s
        self._lock = threading.Lock()
        self._error: str | None = None  # why the server is down; None: not known down
        self._next_try = 0.0

    def before_call(self) -> None:
        """Raise StoreUnavailable at once while the server is known down, except for
        the one caller whose turn it is to try again (it waits for its own attempt)."""
        if self._error is None:
            return
        with self._lock:
            error = self._error
            if error is None:
                return
            now = time.monotonic()
            if now < self._next_try:
                raise _unavailable(error)
            self._next_try = now + self.recheck_s
        self._try_connect()

    def call_failed(self) -> None:
        """A pooled call lost its connection or found none: down only if a connection
        of our own cannot be made either (one killed backend is not an outage)."""
        with self._lock:
            self._next_try = time.monotonic() + self.recheck_s
        try:
            self._try_connect()
        except StoreUnavailable:
            pass

    def _try_connect(self) -> None:
        try:
            psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S).close()
        except psycopg.Error as exc:
            self._error = first_line(exc)
            raise unavailable(exc) from exc
        self._error = None


def connection_lost(exc: BaseException) -> bool:
    """The connection (or the server) is gone, as opposed to an error the server
    reported on a live connection (a deadlock, a lock or statement timeout)."""
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in ADMIN_SHUTDOWN


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def unavailable(exc: BaseException) -> StoreUnavailable:
    return _unavailable(first_line(exc))


def _unavailable(reason: str) -> StoreUnavailable:
    return StoreUnavailable(f"store unavailable: {reason}")
