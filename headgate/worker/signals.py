"""SIGTERM / SIGINT as ``headgate worker`` and ``Worker.run`` handle them.

The first signal stops admission and drains (``stop(drain_ms, wait=False)``); a second
releases what it can at once (``abort()``) and exits the process with ``EXIT_FORCED``.
A leaf of the worker package: it knows the worker only as something that stops and
aborts, so both the ``Worker`` and the launcher import it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any, Protocol

from .run_state import EXIT_FORCED

log = logging.getLogger("headgate.worker")


class Stoppable(Protocol):
    def stop(self, drain_ms: int | None = None, *, wait: bool = True,
             timeout: float | None = None) -> int | None: ...

    def abort(self) -> int: ...


def install_signal_handlers(worker: Stoppable, drain_ms: int | None) -> None:
    received = 0

    def on_signal(signum: int, _frame: Any) -> None:
        nonlocal received
        received += 1
        name = signal.Signals(signum).name
        if received == 1:
            log.info("%s: stopping admission, draining (send again to stop at once)", name)
            # Not here: the handler runs on the main thread between two of its bytecodes,
            # which may hold the very lock stop() takes (the Event the main thread waits
            # on re-takes its lock at every timeout), and would wait for itself forever.
            threading.Thread(target=worker.stop, args=(drain_ms,), kwargs={"wait": False},
                             name="headgate-stop", daemon=True).start()
            return
        log.warning("%s again: releasing unfinished jobs and exiting now", name)
        try:
            worker.abort()
        finally:
            logging.shutdown()
            os._exit(EXIT_FORCED)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
