"""/api/v1/events hears other processes: workers and producers run apart from `serve`,
and on SQLite their commits never reach the server's in-process activity signal."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from test_events import SseReader, open_stream

import headgate
from headgate import Store
from headgate.api.events import stream
from headgate.dashboard import live
from headgate.services.live import EventBroadcaster, ForeignChanges

if TYPE_CHECKING:
    from api_helpers import Api, Servers

pytest_plugins = ["api_helpers"]

WAIT_S = 20.0  # generous: the stream looks at the store twice a second

PRODUCER = """
import sys
import headgate
store = headgate.open_store(sys.argv[1], migrate=False)
headgate.Client(store).enqueue("email.send", b"{}", queue=sys.argv[2])
store.close()
"""

# Claims and finishes every job of a queue, as a `headgate worker` would. With
# `enqueue` it first enqueues one with retention 0, so the finished job is deleted and
# the queue's state counters end where they started.
WORKER = """
import sys
import headgate
from headgate.core import Outcome
store = headgate.open_store(sys.argv[1], migrate=False)
if sys.argv[3] == "enqueue":
    headgate.Client(store).enqueue("email.send", b"{}", queue=sys.argv[2], retention_ms=0)
done = 0
for claim in store.admit("elsewhere-worker", [sys.argv[2]], 10):
    store.ack(claim, Outcome.SUCCESS)
    done += 1
assert done, "nothing to claim"
store.close()
"""


def _run(script: str, *args: str) -> None:
    subprocess.run([sys.executable, "-c", script, *args], check=True, timeout=60,
                   capture_output=True)


def _attached(api: Api) -> SseReader:
    """A stream whose server hears other processes from now on."""
    sse = open_stream(api)
    assert "connected" in sse.frames.get(timeout=10).get("comments", [])
    listening = getattr(api.store, "listening", None)
    if callable(listening):  # PostgreSQL: LISTEN must be in place first
        assert listening(10)
    return sse


def _queues_until(sse: SseReader, queue: str) -> list[str]:
    """The queues of events up to the first naming `queue`."""
    deadline = time.monotonic() + WAIT_S
    while True:
        event = sse.next_event(timeout=max(0.1, deadline - time.monotonic()))
        queues = json.loads(event["data"])["queues"]
        if queue in queues:
            return queues


def _listening_sessions(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query ILIKE 'LISTEN%'").fetchone()
    return int(row[0]) if row else 0


def test_the_consoles_first_socket_hears_other_processes_once_attached(
        store: Store, store_url: str, backend: str) -> None:
    """The console's hub starts the LISTEN with its first socket and waits for it: a
    commit another process makes right after the socket opened is not lost to the
    LISTEN's connecting."""
    if backend != "pg":
        pytest.skip("LISTEN is PostgreSQL's")
    hub = live.LiveHub(store)
    sub = live.Subscriber()
    sub.topics = {"totals"}
    try:
        hub.attach(sub)
        assert store.activity.listening(0)  # in place when attach returns, no wait left
        assert _listening_sessions(store_url) == 1
    finally:
        hub.detach(sub)
        hub.stop(5)


def test_a_server_listens_only_once_a_stream_is_open(servers: Servers,
                                                    backend: str) -> None:
    """PostgreSQL delivers every NOTIFY of the database to every LISTEN connection: a
    server taking producers' requests with no console open would receive and drop one
    for each commit of the whole fleet. Its LISTEN starts with the first stream."""
    if backend != "pg":
        pytest.skip("LISTEN is PostgreSQL's")
    api = servers.start()
    api.enqueue(queue="mail")
    assert api.get("/jobs?queue=mail").status_code == 200
    assert _listening_sessions(servers.store_url) == 0
    sse = _attached(api)
    try:
        assert _listening_sessions(servers.store_url) == 1
        _run(PRODUCER, servers.store_url, "elsewhere")
        assert _queues_until(sse, "elsewhere") == ["elsewhere"]
    finally:
        sse.close()


def test_enqueue_by_another_process_reaches_the_stream(servers: Servers) -> None:
    api = servers.start()
    sse = _attached(api)
    try:
        _run(PRODUCER, servers.store_url, "elsewhere")
        assert _queues_until(sse, "elsewhere") == ["elsewhere"]
    finally:
        sse.close()


def test_jobs_finished_by_another_process_reach_the_stream(servers: Servers) -> None:
    """On PostgreSQL the acking store announces its finished jobs' queues, coalesced
    (headgate/adapters/postgres/announce.py); on SQLite the stream looks at the file."""
    api = servers.start()
    sse = _attached(api)
    try:
        api.enqueue(queue="mail")
        _queues_until(sse, "mail")  # this process's own enqueue, heard in-process
        _run(WORKER, servers.store_url, "mail", "claim")
        assert _queues_until(sse, "mail") == ["mail"]
        assert api.store.counts("mail")["completed"] == 1
    finally:
        sse.close()


def test_job_enqueued_and_finished_between_two_looks_is_heard(servers: Servers) -> None:
    """Retention 0: the queue's state counters are back where they were; its history
    (arrived, completed) is what moved. (On PostgreSQL the enqueue's NOTIFY names it.)"""
    api = servers.start()
    sse = _attached(api)
    try:
        assert api.put("/queues/fleeting", json={"weight": 1}).status_code == 200
        _queues_until(sse, "fleeting")  # the queue exists, empty
        _run(WORKER, servers.store_url, "fleeting", "enqueue")
        assert "fleeting" in _queues_until(sse, "fleeting")
    finally:
        sse.close()


# -- the broadcaster with another store instance (SQLite: no notifications) ------------

@pytest.fixture
def sqlite_stores(tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """The server's store and another one on the same file (another process's view)."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    mine = headgate.open_store(url)
    other = headgate.open_store(url, migrate=False)
    try:
        yield mine, other
    finally:
        other.close()
        mine.close()


def _next_event(frames: Iterator[str]) -> str:
    """The next queue_activity frame, skipping keepalives."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        frame = next(frames)
        if "event: queue_activity" in frame:
            return frame
    raise AssertionError("no queue_activity event")


def _queues(frame: str) -> list[str]:
    data = next(line for line in frame.splitlines() if line.startswith("data: "))
    return list(json.loads(data.removeprefix("data: "))["queues"])


def _event_id(frame: str) -> int:
    return int(next(line for line in frame.splitlines() if line.startswith("id: "))[4:])


def test_resume_after_idle_replays_and_then_reports_foreign_activity_once(
        sqlite_stores: tuple[Store, Store]) -> None:
    """While no stream is open nobody looks at the store. The next stream's first look
    turns other processes' commits meanwhile into one event after the replay, without
    repeating what this process's own signal already announced."""
    mine, other = sqlite_stores
    broadcaster = EventBroadcaster(mine.activity, coalesce_s=0.05,
                                   foreign=ForeignChanges.of(mine), poll_s=0.05)
    try:
        frames = stream(broadcaster, None, keepalive_s=0.5)
        next(frames)  # attached
        headgate.Client(other).enqueue("k", b"", queue="a")
        first = _next_event(frames)
        assert _queues(first) == ["a"]
        frames.close()  # the client went: nobody looks any more

        headgate.Client(other).enqueue("k", b"", queue="b")  # unheard here
        headgate.Client(mine).enqueue("k", b"", queue="c")  # heard, in the ring
        time.sleep(0.3)

        resumed = stream(broadcaster, _event_id(first), keepalive_s=0.5)
        next(resumed)
        assert _queues(next(resumed)) == ["c"]  # the replay
        assert _queues(_next_event(resumed)) == ["b"]  # the first look
        assert next(resumed) == ":hb\n\n"  # and `c` is not announced twice
        resumed.close()
    finally:
        broadcaster.stop()


def test_foreign_commits_that_touch_no_queue_are_not_events(
        sqlite_stores: tuple[Store, Store]) -> None:
    mine, other = sqlite_stores
    headgate.Client(other).enqueue("k", b"", queue="mail")
    broadcaster = EventBroadcaster(mine.activity, coalesce_s=0.05,
                                   foreign=ForeignChanges.of(mine), poll_s=0.05)
    try:
        frames = stream(broadcaster, None, keepalive_s=1.0)
        next(frames)
        other.upsert_rate_class("smtp", 10, 1000)
        assert next(frames) == ":hb\n\n"
        other.set_queue_paused("mail", True)
        assert _queues(_next_event(frames)) == ["mail"]
        frames.close()
    finally:
        broadcaster.stop()


def test_without_a_change_token_nothing_is_polled(store: Store, backend: str) -> None:
    """PostgreSQL has no token: LISTEN feeds its activity signal already. SQLite's
    token is what the broadcaster watches."""
    assert store.capabilities().change_token is (backend == "sqlite")
    if backend == "pg":
        assert ForeignChanges.of(store) is None
    else:
        assert ForeignChanges.of(store) is not None
