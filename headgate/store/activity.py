"""In-process activity signal: how a store tells idle workers and live views "something
changed in these queues" without anyone polling per client.

Adapters publish after commit; PostgreSQL also feeds it from LISTEN so other machines'
writes arrive here too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

Listener = Callable[[frozenset[str]], None]


class ActivityHub:
    """`on_first_interest` runs once, when someone first subscribes or waits: a source
    that costs something to keep (PostgreSQL's LISTEN connection and thread) starts only
    in a process that listens, not in every producer. `ready(timeout)` says whether that
    source hears other processes yet."""

    def __init__(self, on_first_interest: Callable[[], None] | None = None,
                 ready: Callable[[float], bool] | None = None) -> None:
        self._cond = threading.Condition()
        self._seq = 0
        self._listeners: list[Listener] = []
        self._on_first_interest = on_first_interest
        self._ready = ready

    def interested(self) -> None:
        """Start the on-first-interest source now, if it has not started."""
        if self._on_first_interest is None:
            return
        with self._cond:
            start, self._on_first_interest = self._on_first_interest, None
        if start is not None:
            start()

    def listening(self, timeout: float) -> bool:
        """Start the source if it has not started and wait until it hears other
        processes: True once their commits reach this hub (at once for a hub with no
        source, which hears only its own process)."""
        self.interested()
        return self._ready is None or self._ready(timeout)

    @property
    def seq(self) -> int:
        return self._seq

    def publish(self, queues: Iterable[str]) -> None:
        names = frozenset(queues)
        with self._cond:
            self._seq += 1
            self._cond.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(names)
            except Exception:  # noqa: BLE001 - a broken listener must not break a commit
                pass

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        with self._cond:
            self._listeners.append(listener)
        self.interested()

        def unsubscribe() -> None:
            with self._cond:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def wait(self, since_seq: int, timeout: float) -> int:
        """Block until activity after `since_seq` or timeout; returns the current seq."""
        self.interested()
        with self._cond:
            if self._seq == since_seq:
                self._cond.wait(timeout)
            return self._seq
