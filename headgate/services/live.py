"""What changed in the store, for live views: one thread per app that turns commits into
numbered `queue_activity` events (the SSE route in `headgate/api/events.py` streams them).

`EventBroadcaster` starts its thread and subscribes to the store's activity signal
(`store.activity`, fed after every commit, and from LISTEN on PostgreSQL) when the first
stream opens. It coalesces activity over 200 ms into one event carrying the distinct
queue names, numbers it, and keeps the last RING_SIZE events so a client reconnecting
with an event id gets what it missed.

The activity signal only carries this process's commits on SQLite, and workers and
producers normally run in other processes. So while at least one stream is open, the
broadcaster's own thread also watches the store's change token (see `ForeignChanges`):
one look every POLL_S for the whole app, however many clients are connected, and no
look at all while nobody is. PostgreSQL has no token: LISTEN already brings other
processes' activity into the signal.

Event ids are `boot_ms * 1000 + n`: increasing within a process and across restarts,
so an id from before a restart is recognisably older than anything in the ring.

A service, not a route: it owns a thread and reads the store, and neither needs Flask.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

from headgate.core.clock import wall_ms
from headgate.core.schema_constants import HISTORY_BUCKET_MS
from headgate.store.activity import ActivityHub
from headgate.store.port import Inspection

COALESCE_S = 0.2
RING_SIZE = 256
POLL_S = 0.5
ATTACH_WAIT_S = 2.0
MINUTE_MS = HISTORY_BUCKET_MS  # the store's history buckets

log = logging.getLogger("headgate.live")

# Per queue: (state counters and settings, history bucket -> counters).
QueueMark = tuple[tuple[object, ...], dict[int, tuple[int, ...]]]


class ForeignChanges:
    """Which queues were changed by commits this process's activity signal never heard
    (other processes on the same SQLite file).

    `change_token()` (SQLite's `PRAGMA data_version`: microseconds, no lock) says
    whether anything committed since the last look; only then are the queues compared:
    each one's state counters and settings (`queue_stats`, one read) and the arrived,
    completed, failed and rejection counters of its last two history buckets (one read
    for all queues, `history_counters`). The history is what
    catches a job enqueued and finished between two looks with retention 0: its state
    counters are back where they were, its queue's `completed` is not. A queue that
    appeared or disappeared counts as changed.

    A commit that moves none of those (heartbeats, progress, lease renewals, rate
    classes, schedules) names no queue and yields no event. A `queue_activity` client
    refetches what the named queues show; an event naming nothing after every worker
    heartbeat would only make it refetch everything, several times a second, for
    nothing. The in-process signal still reports this process's such commits.

    Without `token`, whether the store has one is asked when a stream first needs to
    know (`active`), not when the app starts: until then the store is not touched.
    """

    def __init__(self, store: Inspection, token: Callable[[], object] | None = None) -> None:
        self.store = store
        self.token = token
        self._asked = token is not None
        self._token: object = None
        self._marks: dict[str, QueueMark] | None = None

    @classmethod
    def of(cls, store: Inspection) -> ForeignChanges | None:
        """None for a backend whose activity signal already hears everyone."""
        return cls(store, store.change_token) if store.capabilities().change_token else None

    @property
    def active(self) -> bool:
        """Whether the store has a change token to watch (asked once)."""
        if not self._asked:
            caps = self.store.capabilities()
            self.token = self.store.change_token if caps.change_token else None
            self._asked = True
        return self.token is not None

    @property
    def may_be_active(self) -> bool:
        """`active`, without asking the store: True while not yet known."""
        return not self._asked or self.token is not None

    def changed(self) -> set[str]:
        """Queues changed since the previous call (nothing on the first: the baseline).

        The token is read before the queues, so a commit between the two is either in
        this comparison or leaves the token moved for the next one — never lost."""
        assert self.token is not None, "changed() of a store without a change token"
        token = self.token()
        if self._marks is not None and token == self._token:
            return set()
        marks = self._read()
        before, self._marks, self._token = self._marks, marks, token
        return set() if before is None else _diff(before, marks)

    def _read(self) -> dict[str, QueueMark]:
        stats = self.store.queue_stats()
        since = self.store.now_ms() // MINUTE_MS * MINUTE_MS - MINUTE_MS
        history = self.store.history_counters(since)
        return {
            s.queue: ((tuple(sorted(s.by_state.items())), s.paused, s.weight,
                       s.max_unfinished_jobs), history.get(s.queue, {}))
            for s in stats
        }


def _diff(before: dict[str, QueueMark], after: dict[str, QueueMark]) -> set[str]:
    changed = set(before.keys() ^ after.keys())
    for name in before.keys() & after.keys():
        (old_settings, old_buckets), (new_settings, new_buckets) = before[name], after[name]
        if old_settings != new_settings:
            changed.add(name)
        else:
            # A bucket the earlier look did not see had all-zero counters then; one that
            # aged out of the window since (or was pruned) says nothing.
            for at, counters in new_buckets.items():
                if old_buckets.get(at, (0,) * len(counters)) != counters:
                    changed.add(name)
                    break
    return changed


class EventBroadcaster:
    def __init__(self, hub: ActivityHub, coalesce_s: float = COALESCE_S,
                 ring_size: int = RING_SIZE, *, foreign: ForeignChanges | None = None,
                 poll_s: float = POLL_S) -> None:
        self.coalesce_s = coalesce_s
        self.poll_s = poll_s
        self.base = wall_ms() * 1000
        self._last_id = self.base
        self._pending: set[str] = set()
        self._pending_since: float | None = None
        self._lock = threading.Condition()
        self._ring: collections.deque[tuple[int, tuple[str, ...]]] = collections.deque(
            maxlen=ring_size
        )
        self._foreign = foreign
        self._streams = 0
        self._next_poll = 0.0
        self._first_look = False
        # Queues announced while no stream was open (so without a look at the store):
        # the look on the next attach must not announce them a second time.
        self._announced_unseen: set[str] = set()
        self._stop = threading.Event()
        self._hub = hub
        self._unsubscribe: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None

    # Called in the committing thread: must stay cheap and never block on clients.
    def _on_activity(self, queues: frozenset[str]) -> None:
        with self._lock:
            self._pending.update(q for q in queues if q)
            if self._pending_since is None:
                self._pending_since = time.monotonic()
            self._lock.notify_all()

    def attach(self) -> None:
        """A stream opened. The first one starts the thread and subscribes to the
        activity signal; both stay after it (PostgreSQL's LISTEN starts with the
        subscription: a server nobody watches would otherwise receive, and drop, a
        notification for every commit of the whole fleet). Every stream waits (briefly)
        until the signal hears other processes. The first one also makes the thread look
        at the store at once, and waits for that look: other processes' commits while
        nobody listened become one event, which a client resuming with Last-Event-ID
        receives after its replay, and every commit after the client saw `: connected`
        is compared against a state from before it."""
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="headgate-sse",
                                                daemon=True)
                self._thread.start()
                self._unsubscribe = self._hub.subscribe(self._on_activity)
        self._hub.listening(ATTACH_WAIT_S)
        with self._lock:
            self._streams += 1
            if self._foreign is None or not self._foreign.active:
                return
            if self._streams == 1:
                self._next_poll = 0.0
                self._first_look = True
                self._lock.notify_all()
            deadline = time.monotonic() + ATTACH_WAIT_S
            while self._first_look and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)

    def detach(self) -> None:
        with self._lock:
            self._streams -= 1

    def _polling(self) -> bool:
        # A stream attached first, so `active` is known by then: no store call here.
        return self._foreign is not None and self._streams > 0 and self._foreign.active

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                while self._pending_since is None and not self._stop.is_set():
                    if not self._polling():
                        self._lock.wait(1.0)
                        continue
                    left = self._next_poll - time.monotonic()
                    if left <= 0:
                        break
                    self._lock.wait(left)
                if self._stop.is_set():
                    return
                since = self._pending_since
            if since is None:
                self._poll()
                continue
            left = since + self.coalesce_s - time.monotonic()
            if left > 0 and self._stop.wait(left):
                return
            self._emit()

    def _poll(self) -> None:
        queues = self._foreign_queues()
        self._next_poll = time.monotonic() + self.poll_s
        if queues:
            self._on_activity(frozenset(queues))  # coalesced like the signal's

    def _emit(self) -> None:
        with self._lock:
            queues = self._pending
            self._pending = set()
            self._pending_since = None
            polling = self._polling()
        foreign: set[str] = set()
        if polling:
            # Also a look at the store: foreign commits so far join this event, and the
            # next look compares against a state that already holds these queues' news.
            foreign = self._foreign_queues()
            self._next_poll = time.monotonic() + self.poll_s
        elif self._foreign is not None and self._foreign.may_be_active:
            self._announced_unseen |= queues
        with self._lock:
            # Heard from this process meanwhile: named by the next event anyway.
            queues |= foreign - self._pending
            self._last_id += 1
            self._ring.append((self._last_id, tuple(sorted(queues))))
            self._lock.notify_all()

    def _foreign_queues(self) -> set[str]:
        assert self._foreign is not None
        try:
            queues = self._foreign.changed() - self._announced_unseen
            self._announced_unseen = set()
        except Exception:  # noqa: BLE001 - a failed look must not end the stream
            log.warning("looking for other processes' activity failed", exc_info=True)
            queues = set()
        with self._lock:
            self._first_look = False
            self._lock.notify_all()
        return queues

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
        with self._lock:
            self._stop.set()
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            thread = self._thread
            self._lock.notify_all()
        if unsubscribe is not None:
            unsubscribe()
        if thread is not None:
            thread.join(2.0)
