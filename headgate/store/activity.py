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
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._seq = 0
        self._listeners: list[Listener] = []

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

        def unsubscribe() -> None:
            with self._cond:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def wait(self, since_seq: int, timeout: float) -> int:
        """Block until activity after `since_seq` or timeout; returns the current seq."""
        with self._cond:
            if self._seq == since_seq:
                self._cond.wait(timeout)
            return self._seq
