"""A skewed clock for one process: on PYTHONPATH, Python imports this at start-up and
every later `time.time()` / `time.time_ns()` in that process runs HG_FAULT_SKEW_S
seconds ahead (or behind, when negative). Monotonic clocks are left alone, as a real
wall-clock skew would leave them."""

from __future__ import annotations

import os
import time

_skew_s = float(os.environ.get("HG_FAULT_SKEW_S", "0") or 0)
if _skew_s:
    _real_time, _real_time_ns = time.time, time.time_ns
    _skew_ns = int(_skew_s * 1_000_000_000)

    def _time() -> float:
        return _real_time() + _skew_s

    def _time_ns() -> int:
        return _real_time_ns() + _skew_ns

    time.time = _time
    time.time_ns = _time_ns
