"""A producer thread at a fixed rate, shared by the benchmarks that hold a load steady
(held_snapshot.py, long_horizon.py): not a benchmark itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Producer(threading.Thread):
    """Enqueues `rate` jobs a second, the due ones every tick, until stopped;
    `envelopes(n)` makes each tick's batch."""

    def __init__(self, url: str, rate: float, tick_s: float,
                 envelopes: Callable[[int], list[Any]]) -> None:
        super().__init__(name="producer", daemon=True)
        self.url = url
        self.rate = rate
        self.tick_s = tick_s
        self.envelopes = envelopes
        self.produced = 0
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        import headgate

        store = headgate.open_store(self.url, migrate=False)
        client = headgate.Client(store)
        start = time.monotonic()
        try:
            while not self.stop.is_set():
                due = int((time.monotonic() - start) * self.rate) - self.produced
                if due > 0:
                    try:
                        client.enqueue_many(self.envelopes(due))
                        self.produced += due
                    except headgate.StoreUnavailable as exc:  # retried on the next tick
                        self.errors.append(str(exc))
                self.stop.wait(self.tick_s)
        finally:
            store.close()
