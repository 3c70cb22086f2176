"""GET /api/v1/events: one Server-Sent Events stream for a whole UI (never per-panel
polling).

One broadcaster per app subscribes to the store's activity signal (`store.activity`,
fed after every commit, and from LISTEN on PostgreSQL) — nothing here queries the
database, however many clients are connected. It coalesces activity over 200 ms into
one `queue_activity` event carrying the distinct queue names, numbers it, and keeps the
last RING_SIZE events so a client reconnecting with `Last-Event-ID` gets what it missed
(the run-server seed's replay on attach). Each client gets a `:hb` comment after 15 s
of silence, so proxies keep the connection and the client notices a dead one.

Event ids are `boot_ms * 1000 + n`: increasing within a process and across restarts,
so an id from before a restart is recognisably older than anything in the ring. When a
client's id is older than the ring reaches back (a gap), it is sent one `resync` event
first: "you missed activity I no longer have — refetch what you show".
"""

from __future__ import annotations

import collections
import json
import re
import threading
import time
from collections.abc import Iterator

import flask

from headgate.store.activity import ActivityHub

from .blueprint import bp
from .context import api_state

COALESCE_S = 0.2
KEEPALIVE_S = 15.0
RING_SIZE = 256


class EventBroadcaster:
    def __init__(self, hub: ActivityHub, coalesce_s: float = COALESCE_S,
                 ring_size: int = RING_SIZE) -> None:
        self.coalesce_s = coalesce_s
        self.base = int(time.time() * 1000) * 1000
        self._last_id = self.base
        self._pending: set[str] = set()
        self._pending_since: float | None = None
        self._lock = threading.Condition()
        self._ring: collections.deque[tuple[int, tuple[str, ...]]] = collections.deque(
            maxlen=ring_size
        )
        self._stop = threading.Event()
        self._unsubscribe = hub.subscribe(self._on_activity)
        self._thread = threading.Thread(target=self._run, name="headgate-sse", daemon=True)
        self._thread.start()

    # Called in the committing thread: must stay cheap and never block on clients.
    def _on_activity(self, queues: frozenset[str]) -> None:
        with self._lock:
            self._pending.update(q for q in queues if q)
            if self._pending_since is None:
                self._pending_since = time.monotonic()
            self._lock.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                while self._pending_since is None and not self._stop.is_set():
                    self._lock.wait(1.0)
                if self._stop.is_set():
                    return
                since = self._pending_since or time.monotonic()
            left = since + self.coalesce_s - time.monotonic()
            if left > 0 and self._stop.wait(left):
                return
            with self._lock:
                queues = tuple(sorted(self._pending))
                self._pending = set()
                self._pending_since = None
                self._last_id += 1
                self._ring.append((self._last_id, queues))
                self._lock.notify_all()

    @property
    def last_id(self) -> int:
        with self._lock:
            return self._last_id

    def replay_after(self, last_seen: int) -> tuple[bool, list[tuple[int, tuple[str, ...]]]]:
        """(gap, events after `last_seen` still in the ring)."""
        with self._lock:
            events = [e for e in self._ring if e[0] > last_seen]
            oldest = self._ring[0][0] if self._ring else self._last_id + 1
            # Older than the ring reaches, or newer than anything issued (another
            # server's id, or garbage): either way the client cannot be caught up.
            gap = last_seen < min(oldest - 1, self._last_id) or last_seen > self._last_id
            return gap, events

    def wait_for(self, last_seen: int, timeout: float) -> bool:
        """Block until an event newer than `last_seen` exists (True) or timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._last_id <= last_seen and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return self._last_id > last_seen

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._unsubscribe()
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        self._thread.join(2.0)


def _frame(event_id: int, queues: tuple[str, ...]) -> str:
    data = json.dumps({"queues": list(queues)}, separators=(",", ":"))
    return f"id: {event_id}\nevent: queue_activity\ndata: {data}\n\n"


def _parse_last_event_id(raw: str | None) -> int | None:
    if raw is None or not re.fullmatch(r"[0-9]{1,19}", raw.strip()):
        return None  # absent or not ours: start live
    return int(raw.strip())


def stream(broadcaster: EventBroadcaster, last_event_id: int | None,
           keepalive_s: float = KEEPALIVE_S) -> Iterator[str]:
    # A first comment flushes the headers so the client knows it is attached.
    yield ": connected\nretry: 2000\n\n"
    cursor = broadcaster.last_id if last_event_id is None else last_event_id
    while not broadcaster.stopped:
        gap, events = broadcaster.replay_after(cursor)
        if gap:
            # Missed more than the ring holds (or across a restart): say so once.
            cursor = broadcaster.last_id if not events else events[0][0] - 1
            yield f"id: {cursor}\nevent: resync\ndata: {{}}\n\n"
        for event_id, queues in events:
            yield _frame(event_id, queues)
            cursor = event_id
        if not broadcaster.wait_for(cursor, keepalive_s):
            if broadcaster.stopped:
                return
            yield ":hb\n\n"


@bp.get("/events")
def events() -> flask.Response:
    broadcaster = api_state().broadcaster
    if broadcaster is None:  # pragma: no cover - created with the store
        from .errors import ApiError

        raise ApiError(503, "event stream unavailable")
    last = _parse_last_event_id(
        flask.request.headers.get("Last-Event-ID") or flask.request.args.get("last_event_id")
    )
    resp = flask.Response(stream(broadcaster, last), mimetype="text/event-stream")
    resp.headers["Cache-Control"] = "no-cache"
    resp.headers["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return resp
