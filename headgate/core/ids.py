"""Job ids: time-sortable so keyset pagination by id is also pagination by age. Lease
ids: unique per admit, cheaper than a uuid4 (no system call per admit)."""

from __future__ import annotations

import itertools
import os
import threading

from .clock import wall_ms

_lock = threading.Lock()
_counter = itertools.count()
_lease_counter = itertools.count()
_last_ms = 0
_prefix = os.urandom(5).hex()
_head = f"{_last_ms:012x}{_prefix}"
_lease_prefix = os.urandom(8).hex()


def new_id() -> str:
    """48-bit ms clock, a per-process random prefix and a counter: unique and ordered
    within a process, ordered by millisecond across processes."""
    global _last_ms, _head
    with _lock:
        now = wall_ms()
        if now > _last_ms:
            _last_ms = now
            _head = f"{now:012x}{_prefix}"  # formatted once a millisecond
        return f"{_head}{next(_counter) & 0xFFFFFF:06x}"


def new_lease_id() -> str:
    """32 hex digits: a per-process random prefix and a counter (next() on a count is
    atomic under the GIL)."""
    return f"{_lease_prefix}{next(_lease_counter):016x}"


def _reseed() -> None:
    """A forked child (an isolated handler, started from a fork server) must not share
    its parent's prefixes: two children would mint the same ids in the same millisecond."""
    global _prefix, _lease_prefix, _head
    _prefix = os.urandom(5).hex()
    _lease_prefix = os.urandom(8).hex()
    _head = f"{_last_ms:012x}{_prefix}"


os.register_at_fork(after_in_child=_reseed)
