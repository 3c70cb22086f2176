"""Live updates: one WebSocket per page, fed by ONE shared hub per app.

Why this shape:
- The hub subscribes once to ``store.activity`` (the in-process signal adapters publish
  after each commit). Activity marks the frame dirty; the hub coalesces bursts into at
  most one frame per ``FRAME_INTERVAL_S`` (≈4 per second).
- For each frame the hub reads what the connected pages need ONCE — counters, queue
  stats, the union of the job rows on screen — and hands the same data to every socket.
  Sockets never read the store themselves, so N open pages cost one set of reads per
  frame, not N (no per-client DB polling, no per-panel polling in the browser).
- Some changes publish no activity: worker heartbeats, job progress, token refill, and
  commits made by OTHER processes on the same SQLite file. A slow shared tick
  (``TICK_INTERVAL_S`` = 2 s) refreshes the topics that depend on those (worker rows,
  the cluster summary, a running job's sheet, rate-class token levels, queue rates) and
  checks SQLite's ``PRAGMA data_version`` on a private connection — a microsecond,
  lock-free read that changes when another process commits — to turn foreign commits
  into a frame too. One tick for the whole hub, not one per client.
- Pages say what they show as "topics" (``data-topic`` attributes collected by
  headgate.js and sent over the socket); each socket renders only its topics, as
  out-of-band HTMX fragments (``hx-swap-oob``), and skips a fragment identical to the
  one it sent last, so an unchanged page sees no DOM churn.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue as queue_mod
import re
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

import flask
from flask_sock import Sock
from werkzeug.datastructures import MultiDict

from headgate.core import StoreUnavailable
from headgate.web.globals import get_store

from . import views
from .query import JobQuery

log = logging.getLogger("headgate.dashboard.live")

FRAME_INTERVAL_S = 0.25
TICK_INTERVAL_S = 2.0
LISTEN_WAIT_S = 2.0  # the longest a socket's attach waits for PostgreSQL's LISTEN
# How soon a socket's reader notices that this side closed the socket: a close of ours
# does not wake a receive() waiting for the peer (simple_websocket), only its timeout does.
READ_POLL_S = 0.5
MAX_TOPICS_PER_SOCKET = 200
MAX_JOB_TOPICS = 500  # union over all sockets, per frame
GOING_AWAY = 1001  # WebSocket close code: the server is going down
_TOPIC_RE = re.compile(r"^(totals|counts|queues|queue|workers|running|cluster|rate_classes|"
                       r"quarantine|periodic|partitions|job|sheet|op|throughput)"
                       r":?(.{0,300})$", re.S)
# Topics refreshed on store activity / on the slow tick.
ON_ACTIVITY = frozenset({"totals", "counts", "queues", "queue", "cluster", "rate_classes",
                         "running",
                         "quarantine", "periodic", "partitions", "job", "sheet", "op",
                         "throughput"})
ON_TICK = frozenset({"queues", "queue", "workers", "running", "cluster", "rate_classes",
                     "periodic",
                     "sheet", "op", "throughput"})
# The Jobs list's "N new jobs" prompt: its key carries the list's filter (a URL query),
# which may be longer than the other topics' keys.
NEW_JOBS_TOPIC = "newjobs:"
MAX_NEW_JOBS_KEY = 2000
ON_ACTIVITY = ON_ACTIVITY | {"newjobs"}

sock = Sock()


def split_topic(topic: str) -> tuple[str, str] | None:
    if topic.startswith(NEW_JOBS_TOPIC):
        key = topic[len(NEW_JOBS_TOPIC):]
        return ("newjobs", key) if len(key) <= MAX_NEW_JOBS_KEY else None
    m = _TOPIC_RE.match(topic)
    if not m:
        return None
    return m.group(1), m.group(2)


class Subscriber:
    """One open socket: its topics, and the newest data waiting to be rendered."""

    def __init__(self) -> None:
        self.topics: set[str] = set()
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[str, Any] = {}
        self.inbox: queue_mod.SimpleQueue[str | None] = queue_mod.SimpleQueue()
        self.closed = False
        self.going_away = False  # closed by the hub because the server is stopping
        self.reader: threading.Thread | None = None  # the socket's receiving thread

    def offer(self, frame: dict[str, Any]) -> None:
        mine = {t: v for t, v in frame.items() if t in self.topics}
        if not mine:
            return
        with self._lock:
            self._pending.update(mine)
        self.event.set()

    def take(self) -> dict[str, Any]:
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending


class LiveHub:
    """Shared per app: one activity subscription, one thread, one set of reads a frame."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._subs: set[Subscriber] = set()
        self._dirty = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None
        # Commits of other processes (SQLite; PostgreSQL's arrive as activity by LISTEN).
        self._probe: Callable[[], object] | None = (
            store.change_token if store.capabilities().change_token else None)
        self._last_version: object = None
        self._stopping = False
        # The sockets' reader threads, so that stop() can wait for them too.
        self._readers: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        self.frames = 0  # for tests and diagnostics

    # -- subscribers ----------------------------------------------------------------
    def attach(self, sub: Subscriber) -> None:
        """The first socket subscribes (on PostgreSQL that starts the LISTEN); every one
        waits, briefly, until other processes' commits are heard, so none made after the
        socket opened goes unseen while the LISTEN connects."""
        with self._lock:
            if sub.reader is not None:
                self._readers.add(sub.reader)
            if self._stopping:  # a socket opened after the stop began closes at once
                sub.closed = sub.going_away = True
                return
            self._subs.add(sub)
            if self._unsubscribe is None:
                self._unsubscribe = self.store.activity.subscribe(self._on_activity)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="headgate-live",
                                                daemon=True)
                self._thread.start()
        self.store.activity.listening(LISTEN_WAIT_S)

    def detach(self, sub: Subscriber) -> None:
        with self._lock:
            self._subs.discard(sub)
            last = not self._subs
        if last:
            self._wake.set()  # the thread ends now, not at its next tick

    def close_all(self) -> None:
        """End every socket's handler (and refuse new ones): the server is stopping."""
        with self._lock:
            self._stopping = True
            subs = list(self._subs)
        for sub in subs:
            sub.closed = sub.going_away = True
            sub.event.set()

    def stop(self, timeout: float) -> bool:
        """`close_all`, then wait up to `timeout` for the sockets' readers and the hub's
        thread to end (the thread ends when the last socket's handler has left): whether
        all did. Closing alone leaves them to end in their own time, which an app shut
        down in a process that goes on (an embedding app, a test) would not wait for."""
        self.close_all()
        deadline = time.monotonic() + timeout
        with self._lock:
            readers = list(self._readers)
        for reader in readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        with self._lock:  # no new thread starts once stopping
            thread = self._thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t is not None and t.is_alive() for t in [*readers, thread])

    def _on_activity(self, queues: frozenset[str]) -> None:
        # Called on the committing thread: only flag and wake, never read here.
        self._dirty = True
        self._wake.set()

    # -- the frame loop -------------------------------------------------------------
    def _run(self) -> None:
        last_frame = 0.0
        last_tick = time.monotonic()
        while True:
            with self._lock:
                if not self._subs:
                    # Nobody is watching: stop, and let the next attach start a thread.
                    self._thread = None
                    return
            self._wake.wait(timeout=max(0.05, TICK_INTERVAL_S - (time.monotonic() - last_tick)))
            if not self._subs:
                continue  # the last socket left: end (above) without a frame
            # Coalesce: a burst of commits within one interval becomes one frame.
            wait = FRAME_INTERVAL_S - (time.monotonic() - last_frame)
            if wait > 0:
                time.sleep(wait)
            self._wake.clear()
            now = time.monotonic()
            tick = now - last_tick >= TICK_INTERVAL_S
            if tick:
                last_tick = now
                if self._foreign_commit():
                    self._dirty = True
            dirty, self._dirty = self._dirty, False
            if not dirty and not tick:
                continue
            try:
                self.publish_frame(activity=dirty, tick=tick)
            except Exception:  # noqa: BLE001 - a failed read must not kill live updates
                log.exception("live frame failed")
            last_frame = time.monotonic()

    def _foreign_commit(self) -> bool:
        if self._probe is None:
            return False
        try:
            version = self._probe()
        except StoreUnavailable:
            return True
        changed = self._last_version is not None and version != self._last_version
        self._last_version = version
        return changed

    def publish_frame(self, *, activity: bool, tick: bool) -> dict[str, Any]:
        """Read every topic some socket needs (once) and offer it to all sockets."""
        with self._lock:
            subs = list(self._subs)
        wanted: set[str] = set()
        for sub in subs:
            wanted |= sub.topics
        due = {t for t in wanted if _due(t, activity, tick)}
        frame = load_topics(self.store, due)
        self.frames += 1
        for sub in subs:
            sub.offer(frame)
        return frame


def _due(topic: str, activity: bool, tick: bool) -> bool:
    kind = topic.split(":", 1)[0]
    return (activity and kind in ON_ACTIVITY) or (tick and kind in ON_TICK)


def load_topics(store: Any, topics: set[str]) -> dict[str, Any]:
    """The data for each topic, with shared reads (queue stats, workers) done once."""
    cache: dict[str, Any] = {}

    def once(key: str, fn: Callable[[], Any]) -> Any:
        if key not in cache:
            cache[key] = fn()
        return cache[key]

    out: dict[str, Any] = {}
    jobs = 0
    rows: dict[str, Any] = {}  # job topic -> its job (or None), given its start below
    for topic in sorted(topics):
        parts = split_topic(topic)
        if parts is None:
            continue
        kind, key = parts
        if kind == "totals":
            out[topic] = once("counts:", lambda: store.counts(None))
        elif kind == "counts":
            out[topic] = once(topic, partial(store.counts, key or None))
        elif kind == "queues":
            live = once("live", lambda: store.list_workers(views.WORKER_STALE_MS))
            served = {q for w in live for q in w.queues}
            out[topic] = {"stats": once("queue_rows",
                                        partial(views.queue_rows_data, store, served)),
                          "served": served}
        elif kind == "queue":
            stats = once("queue_rows", lambda: views.queue_rows_data(store))
            out[topic] = next((q for q in stats if q["queue"] == key), None)
        elif kind == "workers":
            out[topic] = once("live", lambda: store.list_workers(views.WORKER_STALE_MS))
        elif kind == "running":
            out[topic] = views.running_now(store)
        elif kind == "cluster":
            out[topic] = views.cluster_summary(
                once("live", lambda: store.list_workers(views.WORKER_STALE_MS)),
                once("all", lambda: store.list_workers(views.WORKER_ALL_MS)),
                once("queue_stats", store.queue_stats))
        elif kind == "rate_classes":
            out[topic] = store.rate_classes()
        elif kind == "quarantine":
            out[topic] = store.quarantine_list()
        elif kind == "periodic":
            out[topic] = store.list_schedules()
        elif kind == "partitions":
            out[topic] = store.partitions(key) if key else []
        elif kind in ("job", "sheet"):
            jobs += 1
            if jobs > MAX_JOB_TOPICS:
                continue
            if kind == "job":
                rows[topic] = store.get_job(key)
            else:
                out[topic] = views.sheet_data(store, key)
        elif kind == "op":
            out[topic] = store.get_operation(key)
        elif kind == "newjobs":
            out[topic] = views.new_jobs_count(store, key)
        elif kind == "throughput":
            out[topic] = views.throughput_chart(store)
    if rows:
        # A row re-rendered live keeps its expected start: one forecast for all of them.
        starts = views.expected_starts(store, [j for j in rows.values() if j is not None])
        for topic, job in rows.items():
            out[topic] = None if job is None else {"job": job, "start": starts.get(job.id)}
    return out


_HUB_KEY = "headgate.dashboard.live"
_STOPPING_KEY = "headgate.dashboard.live.stopping"
_hub_lock = threading.Lock()


def close_sockets(app: flask.Flask) -> None:
    """Close the app's live sockets with "going away" (1001), which the page answers by
    reconnecting, and refuse new ones."""
    with _hub_lock:
        app.extensions[_STOPPING_KEY] = True
        hub = app.extensions.get(_HUB_KEY)
    if hub is not None:
        hub.close_all()


def stop(app: flask.Flask, timeout: float) -> bool:
    """`close_sockets`, then wait up to `timeout` for the app's live threads to end
    (`LiveHub.stop`): whether they did."""
    close_sockets(app)
    with _hub_lock:
        hub = app.extensions.get(_HUB_KEY)
    return hub is None or hub.stop(timeout)


def hub_for(app: flask.Flask) -> LiveHub:
    with _hub_lock:
        hub = app.extensions.get(_HUB_KEY)
        if hub is None:
            hub = LiveHub(get_store(app))
            app.extensions[_HUB_KEY] = hub
            if app.extensions.get(_STOPPING_KEY):
                hub.close_all()
        return hub


# -- rendering ------------------------------------------------------------------------------

def render_topic(topic: str, data: Any, query: JobQuery | None = None) -> str:
    parts = split_topic(topic)
    if parts is None:
        return ""
    kind, key = parts
    query = query or JobQuery()
    starts = {}
    if kind == "job" and data and data.get("start"):
        starts = {data["job"].id: data["start"]}
    return flask.render_template("dashboard/_live.html", kind=kind, key=key, data=data,
                                 topic=topic, query=query, starts=starts,
                                 jobs_url=query.links(flask.url_for("dashboard.jobs")))


def parse_watch(message: str) -> tuple[set[str], JobQuery] | None:
    """`{"topics": [...], "query": "?state=…"}` from headgate.js: what the page shows,
    and its URL query (job rows link to the sheet keeping the page's filters)."""
    try:
        body = json.loads(message)
    except ValueError:
        return None
    topics = body.get("topics") if isinstance(body, dict) else None
    if not isinstance(topics, list):
        return None
    out = {t for t in topics if isinstance(t, str) and split_topic(t) is not None}
    raw = body.get("query") if isinstance(body.get("query"), str) else ""
    query = JobQuery.from_args(MultiDict(parse_qsl(raw.lstrip("?")[:2000])))
    return set(sorted(out)[:MAX_TOPICS_PER_SOCKET]), query


def group_messages(chunks: list[str]) -> list[str]:
    """One WebSocket message per fragment, except table rows, which share one.

    htmx parses a message inside a <template>: rows parse only when the message starts
    in table context, and a row after a <nav> or <section> would be dropped. Rows go
    together (a table body's worth in one message), everything else alone."""
    rows = [c for c in chunks if c.startswith("<tr")]
    others = [c for c in chunks if not c.startswith("<tr")]
    return others + (["\n".join(rows)] if rows else [])


@sock.route("/live", bp=views.bp)
def live(ws: Any) -> None:
    """The page's socket. Receives topic lists, sends out-of-band fragments."""
    app = flask.current_app._get_current_object()  # type: ignore[attr-defined]
    hub = hub_for(app)
    sub = Subscriber()

    def reader() -> None:
        try:
            while True:
                msg = ws.receive(timeout=READ_POLL_S)  # raises once the socket is closed
                if msg is None:
                    continue
                sub.inbox.put(msg if isinstance(msg, str) else msg.decode("utf-8", "replace"))
                sub.event.set()
        except Exception:  # noqa: BLE001 - ConnectionClosed or a broken socket
            pass
        finally:
            sub.closed = True
            sub.event.set()

    sub.reader = threading.Thread(target=reader, name="headgate-live-reader", daemon=True)
    sub.reader.start()
    hub.attach(sub)
    sent: dict[str, str] = {}
    query = JobQuery()
    try:
        while not sub.closed and ws.connected:
            sub.event.wait(timeout=30)
            sub.event.clear()
            while True:
                try:
                    msg = sub.inbox.get_nowait()
                except queue_mod.Empty:
                    break
                watch = parse_watch(msg or "")
                if watch is not None:
                    topics, query = watch
                    sub.topics = topics
                    sent = {t: v for t, v in sent.items() if t in topics}
            frame = sub.take()
            if not frame:
                continue
            chunks = []
            for topic in sorted(frame):
                if topic not in sub.topics:
                    continue
                html = render_topic(topic, frame[topic], query).strip()
                if html and sent.get(topic) != html:
                    sent[topic] = html
                    chunks.append(html)
            for message in group_messages(chunks):
                ws.send(message)
        if sub.going_away and ws.connected:
            # A client that closed meanwhile raises ConnectionClosed, which flask-sock takes.
            with contextlib.suppress(OSError):
                ws.close(GOING_AWAY, "server stopping")
    finally:
        hub.detach(sub)
