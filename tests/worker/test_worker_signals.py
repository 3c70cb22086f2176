"""The worker's SIGTERM handler (headgate/worker/signals.py) runs on the main thread
between two bytecodes, wherever that thread was: it must not take a lock the
interrupted code may hold."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from headgate.worker.run_state import EXIT_OK, STATUS_STOPPING, Control
from headgate.worker.signals import install_signal_handlers


class Stops:
    def __init__(self) -> None:
        self.control = Control()

    def stop(self, drain_ms: int | None = None, *, wait: bool = True,
             timeout: float | None = None) -> int | None:
        self.control.request_stop(EXIT_OK, STATUS_STOPPING)
        return None

    def abort(self) -> int:
        return 0


def test_sigterm_while_the_main_thread_holds_the_stop_events_lock() -> None:
    """`Event.wait(0.2)` in the worker's main loop re-takes the event's lock at each
    timeout; a SIGTERM handled then used to call `Event.set()`, which waited for that
    same lock: the worker never stopped (seen once in CI). A 5 s alarm turns such a
    hang into a failure here."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run on the main thread only")
    worker = Stops()
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)}

    def stuck(_signum: int, _frame: Any) -> None:
        raise TimeoutError("the SIGTERM handler waited for a lock its thread holds")

    try:
        install_signal_handlers(worker, None)
        signal.signal(signal.SIGALRM, stuck)
        signal.alarm(5)
        with worker.control.stop_requested._cond:  # type: ignore[attr-defined]
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):  # bytecodes for the handler to run between
                pass
        signal.alarm(0)
        assert worker.control.stop_requested.wait(5)
    finally:
        signal.alarm(0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
