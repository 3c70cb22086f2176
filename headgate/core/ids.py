"""Job ids: time-sortable so keyset pagination by id is also pagination by age."""

from __future__ import annotations

import itertools
import os
import threading
import time

_lock = threading.Lock()
_counter = itertools.count()
_last_ms = 0
_prefix = os.urandom(5).hex()


def new_id() -> str:
    """48-bit ms clock, a per-process random prefix and a counter: unique and ordered
    within a process, ordered by millisecond across processes."""
    global _last_ms
    with _lock:
        now = int(time.time() * 1000)
        _last_ms = max(now, _last_ms)
        seq = next(_counter) & 0xFFFFFF
        return f"{_last_ms:012x}{_prefix}{seq:06x}"
