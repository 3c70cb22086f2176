"""LISTEN/NOTIFY: activity from every process sharing the database reaches this one.

A notification only shortens a wait; workers keep polling, so a lost one costs latency,
never a job. Each process tags its own notifications so it does not hear itself twice.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from collections.abc import Callable

import psycopg

from headgate.adapters.shared.queries import fill, load
from headgate.core.schema_constants import NOTIFY_QUEUES_MAX_CHARS
from headgate.store.activity import ActivityHub

log = logging.getLogger("headgate.postgres")

CHANNEL = "headgate"
FINISHED_CHANNEL = "headgate_finished"

Q = load(__name__)
LISTEN = fill(Q["listen"], channel=CHANNEL)
LISTEN_FINISHED = fill(Q["listen"], channel=FINISHED_CHANNEL)
NOTIFY = Q["notify"]


def new_origin() -> str:
    """Per store instance: its own hub already heard what it publishes."""
    return uuid.uuid4().hex[:12]


def encode(queues: set[str] | frozenset[str], origin: str) -> str:
    # NOTIFY payloads are limited to 8000 bytes: fall back to "something changed".
    # headgate_wake_v1 (headgate/db/postgres/functions/checks.sql) builds the same text.
    body = "\x1f".join(sorted(queues))
    return f"{origin}|{body if len(body) < NOTIFY_QUEUES_MAX_CHARS else ''}"


def decode(payload: str) -> tuple[str, frozenset[str]]:
    origin, _, body = payload.partition("|")
    return origin, frozenset(q for q in body.split("\x1f") if q)


class Listener:
    def __init__(self, url: str, hub: ActivityHub, origin: str) -> None:
        self.url = url
        self.hub = hub
        self.origin = origin
        self._stop = threading.Event()
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="headgate-listen", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(LISTEN)
                    # Anything may have happened while we were not listening: said
                    # before `connected`, so a caller that waited for it hears every
                    # commit after as news of its own.
                    self.hub.publish(())
                    self.connected.set()
                    backoff = 0.1
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.1, stop_after=256):
                            origin, queues = decode(note.payload)
                            if origin != self.origin:
                                self.hub.publish(queues)
            except psycopg.Error as exc:
                self.connected.clear()
                if self._stop.is_set():
                    return
                log.warning("listen connection lost (%s); retrying in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


class Notifier:
    """Sends NOTIFYs for changes made outside an enqueue (acks, retries, queue controls)
    from its own thread and connection, so the caller returns without the extra round
    trip; bursts coalesce into one notification. Enqueues notify inside their own
    transaction instead (headgate/adapters/postgres/enqueue.py): a producer's wake-up
    then leaves at its commit and never after a rollback."""

    def __init__(self, url: str, origin: str) -> None:
        self.url = url
        self.origin = origin
        self._pending: queue.SimpleQueue[frozenset[str] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="headgate-notify", daemon=True)
        self._thread.start()

    def send(self, queues: frozenset[str]) -> None:
        self._pending.put(queues)

    def _run(self) -> None:
        conn: psycopg.Connection | None = None
        while True:
            first = self._pending.get()
            if first is None:
                break
            names = set(first)
            stop = False
            while not self._pending.empty():
                more = self._pending.get()
                if more is None:
                    stop = True
                    break
                names |= more
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
                conn.execute(NOTIFY, (CHANNEL, encode(names, self.origin)))
            except psycopg.Error as exc:  # a lost wake-up only costs latency
                log.debug("notify failed: %s", exc)
                if conn is not None:
                    conn.close()
                conn = None
            if stop:
                break
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Send what is queued (a short-lived process's last wake-up), then stop."""
        self._pending.put(None)
        self._thread.join(timeout=2)
        self._thread.join(timeout=2)


# How long watch_finished waits for the LISTEN to be in place before telling the caller
# to poll instead.
FINISHED_CONNECT_S = 5.0


class FinishedListener:
    """One LISTEN connection per store for ``headgate_finished`` (sent by the triggers
    of headgate/db/postgres/functions/finished_notify.sql), fanned out to the callbacks
    watching each job id. Started by the first watch; on every (re)connection all
    watchers are called, since a finish may have been missed while not listening."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._watchers: dict[str, set[Callable[[], None]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="headgate-finished",
                                        daemon=True)
        self._thread.start()

    def watch(self, job_id: str, callback: Callable[[], None]) -> Callable[[], None] | None:
        if not self.connected.wait(FINISHED_CONNECT_S):
            return None
        with self._lock:
            self._watchers.setdefault(job_id, set()).add(callback)

        def unwatch() -> None:
            with self._lock:
                left = self._watchers.get(job_id)
                if left is not None:
                    left.discard(callback)
                    if not left:
                        del self._watchers[job_id]

        return unwatch

    def _call(self, job_id: str | None) -> None:
        with self._lock:
            if job_id is None:
                callbacks = [c for cs in self._watchers.values() for c in cs]
            else:
                callbacks = list(self._watchers.get(job_id, ()))
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 - one waiter's bug must not stop the rest
                log.exception("finished-job callback failed")

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(LISTEN_FINISHED)
                    self.connected.set()
                    backoff = 0.1
                    self._call(None)
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.1, stop_after=256):
                            self._call(note.payload)
            except psycopg.Error as exc:
                self.connected.clear()
                if self._stop.is_set():
                    return
                log.warning("finished-job listen connection lost (%s); retrying in %.1fs",
                            exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
