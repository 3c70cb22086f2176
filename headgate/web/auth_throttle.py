"""Failed token attempts per client address: guessing a token is slowed to a trickle.

The API (a bearer token that matches none) and the console's sign-in form (a token the
server does not accept) count each failure against the caller's address. Past the
limit within one minute, that address gets 429 with Retry-After — even for a right
token, or guessing would go on — until its oldest counted failure is a minute old.
A missing token is not counted: it guesses nothing.

Counts live in this process (each server process counts its own) and are bounded in
the number of addresses kept. Behind a reverse proxy every caller has the proxy's
address unless HG_TRUSTED_PROXIES names the proxies (proxies.py), which makes the
forwarded client the address counted; `HG_AUTH_FAILURES_PER_MINUTE` sets the limit.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque

import flask

WINDOW_S = 60.0
MAX_ADDRESSES = 10_000
_EXTENSION = "headgate.failed_attempts"


class FailedAttempts:
    def __init__(self, limit: int, *, window_s: float = WINDOW_S,
                 max_addresses: int = MAX_ADDRESSES) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_addresses = max_addresses
        self._lock = threading.Lock()
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, address: str) -> int:
        """Whole seconds until `address` may try again; 0 when it may now."""
        now = time.monotonic()
        with self._lock:
            times = self._failures.get(address)
            if times is None:
                return 0
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if not times:
                del self._failures[address]
                return 0
            if len(times) < self.limit:
                return 0
            return max(1, math.ceil(times[0] + self.window_s - now))

    def failed(self, address: str) -> None:
        now = time.monotonic()
        with self._lock:
            times = self._failures.pop(address, None) or deque()
            times.append(now)
            while len(times) > self.limit:  # only the newest `limit` matter
                times.popleft()
            self._failures[address] = times  # newest address last
            while len(self._failures) > self.max_addresses:
                self._failures.popitem(last=False)


def install(app: flask.Flask, limit: int) -> FailedAttempts:
    """The app's one counter, shared by the API and the console."""
    counter = app.extensions.get(_EXTENSION)
    if counter is None:
        counter = app.extensions[_EXTENSION] = FailedAttempts(limit)
    return counter


def counter(app: flask.Flask) -> FailedAttempts | None:
    return app.extensions.get(_EXTENSION)  # type: ignore[no-any-return]


def wait_s() -> int:
    """Seconds the current request's address must wait before its token is looked at;
    0 when it may try (or when the app counts nothing)."""
    found = counter(flask.current_app)
    return found.retry_after(_address()) if found is not None else 0


def record_failure() -> None:
    found = counter(flask.current_app)
    if found is not None:
        found.failed(_address())


def _address() -> str:
    return flask.request.remote_addr or "unknown"
