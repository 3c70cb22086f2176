"""LISTEN/NOTIFY: activity from every process sharing the database reaches this one.

A notification only shortens a wait; workers keep polling, so a lost one costs latency,
never a job. Each process tags its own notifications so it does not hear itself twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import uuid
from collections.abc import Callable
from typing import ClassVar

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


# The longest a LISTEN thread sleeps before it looks at its stop flag again: a safety
# net only, since close() wakes it. Longer than CLOSE_JOIN_S, so that a thread found
# gone after close() shows the wake-up worked.
IDLE_WAIT_S = 5.0
# How long close() waits for a LISTEN thread (one stuck connecting is a daemon anyway).
CLOSE_JOIN_S = 2.0
# Reconnection backoff: doubles from the first to the last.
BACKOFF_FIRST_S = 0.1
BACKOFF_LAST_S = 5.0
# Notifications handled between two looks at the stop flag.
NOTIFIES_PER_READ = 256


class _ListenThread:
    """A LISTEN connection on a thread of its own, reconnecting with backoff.

    The thread waits in psycopg's own wait for notifications (the GIL released, taken
    once when one arrives: a select() of our own in front of it added a hand-off, about
    0.1 ms to every wake-up), up to IDLE_WAIT_S at a time. close() ends that wait at once
    by shutting the connection's socket down for both directions, which the wait reads
    as the end of the connection; an idle process does not wake for nothing meanwhile.
    Subclasses say what to LISTEN to and what a (re)connection and a payload mean; they
    set their own fields before calling this __init__, which starts the thread."""

    listen_sql: ClassVar[str]
    label: ClassVar[str]  # names the connection in log messages

    def __init__(self, url: str, thread_name: str) -> None:
        self.url = url
        self._stop = threading.Event()
        self.connected = threading.Event()
        # The connection's socket while the thread waits on it; set and cleared under the
        # lock, so close() never shuts down a descriptor number reused by someone else.
        self._socket: int | None = None
        self._socket_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def _on_connect(self) -> None:
        """Called on the thread once LISTEN is in place, on every (re)connection."""

    def _on_payload(self, payload: str) -> None:
        """Called on the thread for each notification heard."""

    def _run(self) -> None:
        backoff = BACKOFF_FIRST_S
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(self.listen_sql)
                    with self._socket_lock:
                        if self._stop.is_set():
                            return
                        self._socket = conn.fileno()
                    try:
                        self._on_connect()
                        backoff = BACKOFF_FIRST_S
                        while not self._stop.is_set():
                            # The backlog first: a notification that came in with
                            # LISTEN's reply was read off the socket then.
                            for note in conn.notifies(timeout=IDLE_WAIT_S,
                                                      stop_after=NOTIFIES_PER_READ):
                                self._on_payload(note.payload)
                    finally:
                        with self._socket_lock:
                            self._socket = None
            except psycopg.Error as exc:
                self.connected.clear()
                if self._stop.is_set():
                    return
                log.warning("%s connection lost (%s); retrying in %.1fs",
                            self.label, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_LAST_S)

    def close(self) -> None:
        self._stop.set()
        with self._socket_lock:
            if self._socket is not None:
                # On a duplicate of the descriptor, whose close leaves psycopg's intact.
                with contextlib.suppress(OSError), \
                        socket.socket(fileno=os.dup(self._socket)) as sock:
                    sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=CLOSE_JOIN_S)


class Listener(_ListenThread):
    """Feeds the hub what other stores (in this process or any other) announce."""

    listen_sql = LISTEN
    label = "listen"

    def __init__(self, url: str, hub: ActivityHub, origin: str) -> None:
        self.hub = hub
        self.origin = origin
        super().__init__(url, "headgate-listen")

    def _on_connect(self) -> None:
        # Anything may have happened while we were not listening: said before
        # `connected`, so a caller that waited for it hears every commit after as news
        # of its own.
        self.hub.publish(())
        self.connected.set()

    def _on_payload(self, payload: str) -> None:
        origin, queues = decode(payload)
        if origin != self.origin:
            self.hub.publish(queues)


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


# How long watch_finished waits for the LISTEN to be in place before telling the caller
# to poll instead.
FINISHED_CONNECT_S = 5.0


class FinishedListener(_ListenThread):
    """One LISTEN connection per store for ``headgate_finished`` (sent by the triggers
    of headgate/db/postgres/functions/finished_notify.sql), fanned out to the callbacks
    watching each job id. Started by the first watch; on every (re)connection all
    watchers are called, since a finish may have been missed while not listening."""

    listen_sql = LISTEN_FINISHED
    label = "finished-job listen"

    def __init__(self, url: str) -> None:
        self._watchers: dict[str, set[Callable[[], None]]] = {}
        self._lock = threading.Lock()
        super().__init__(url, "headgate-finished")

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

    def _on_connect(self) -> None:
        self.connected.set()
        self._call(None)

    def _on_payload(self, payload: str) -> None:
        self._call(payload)
