"""A producer thread at a fixed rate, shared by the benchmarks that hold a load steady
(held_snapshot.py, long_horizon.py, and held_snapshot_peers.py in the peers' venv, so
nothing here imports headgate at module level): not a benchmark itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

# What a session yields: send(first, n) enqueues jobs first .. first + n - 1, and the
# errors a tick retries on the next one.
Sender = tuple[Callable[[int, int], None], tuple[type[BaseException], ...]]


class RateProducer(threading.Thread):
    """Enqueues `rate` jobs a second, the due ones every tick, numbered from 0, until
    stopped; a producer that falls behind catches up. `session()` opens the producer's
    connection in this thread and yields its sender."""

    def __init__(self, rate: float, tick_s: float,
                 session: Callable[[], AbstractContextManager[Sender]]) -> None:
        super().__init__(name="producer", daemon=True)
        self.rate = rate
        self.tick_s = tick_s
        self.session = session
        self.produced = 0
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with self.session() as (send, unavailable):
            start = time.monotonic()
            while not self.stop.is_set():
                due = int((time.monotonic() - start) * self.rate) - self.produced
                if due > 0:
                    try:
                        send(self.produced, due)
                        self.produced += due
                    except unavailable as exc:  # retried on the next tick
                        self.errors.append(str(exc))
                self.stop.wait(self.tick_s)


class Producer(RateProducer):
    """headgate's: `Client.enqueue_many` of `envelopes(n)` each tick."""

    def __init__(self, url: str, rate: float, tick_s: float,
                 envelopes: Callable[[int], list[Any]]) -> None:
        self.url = url
        self.envelopes = envelopes
        super().__init__(rate, tick_s, self._session)

    @contextmanager
    def _session(self) -> Iterator[Sender]:
        import headgate

        store = headgate.open_store(self.url, migrate=False)
        client = headgate.Client(store)
        def send(_first: int, n: int) -> None:
            client.enqueue_many(self.envelopes(n))

        try:
            yield send, (headgate.StoreUnavailable,)
        finally:
            store.close()
