"""/api/v1/events: SSE fed by the store's activity signal, coalesced, resumable."""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from headgate.api.events import stream
from headgate.services.live import EventBroadcaster
from headgate.store.activity import ActivityHub

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures


class SseReader:
    """A minimal SSE client on a raw socket, read on a thread; `close` shuts the socket
    down (closing a `requests` stream from another thread while it reads deadlocks)."""

    def __init__(self, base: str, path: str, headers: dict[str, str]) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        lines = [f"GET {path} HTTP/1.0", f"Host: {host}:{port}",
                 *(f"{k}: {v}" for k, v in headers.items()), "", ""]
        self.sock.sendall("\r\n".join(lines).encode())
        self.file = self.sock.makefile("rb")
        status = self.file.readline().decode()
        self.status = int(status.split()[1])
        self.headers: dict[str, str] = {}
        while (line := self.file.readline().decode().rstrip("\r\n")):
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self.frames: queue.Queue[dict[str, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        frame: dict[str, Any] = {}
        try:
            for raw_bytes in self.file:
                raw = raw_bytes.decode().rstrip("\r\n")
                if raw == "":
                    if frame:
                        self.frames.put(frame)
                    frame = {}
                    continue
                if raw.startswith(":"):
                    frame.setdefault("comments", []).append(raw[1:].strip())
                    continue
                name, _, value = raw.partition(":")
                frame[name] = value.lstrip(" ")
        except (OSError, ValueError):
            return

    def next_event(self, timeout: float = 10.0, kind: str = "queue_activity") -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            frame = self.frames.get(timeout=max(0.01, deadline - time.monotonic()))
            if frame.get("event") == kind:
                return frame

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(5)
        self.sock.close()


def open_stream(api: Api, last_event_id: str | None = None) -> SseReader:
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    reader = SseReader(api.base, "/api/v1/events", headers)
    assert reader.status == 200
    assert reader.headers["content-type"].startswith("text/event-stream")
    assert reader.headers["cache-control"] == "no-cache"
    return reader


def test_enqueue_produces_a_coalesced_queue_activity_event(api: Api) -> None:
    sse = open_stream(api)
    try:
        first = sse.frames.get(timeout=10)
        assert "connected" in first.get("comments", [])
        api.enqueue(queue="mail")
        api.enqueue(queue="reports")
        api.enqueue(queue="mail")
        event = sse.next_event()
        assert json.loads(event["data"]) == {"queues": ["mail", "reports"]}
        assert int(event["id"]) > 0
    finally:
        sse.close()


def test_resume_with_last_event_id_replays_missed_events(api: Api) -> None:
    sse = open_stream(api)
    try:
        api.enqueue(queue="a")
        first = sse.next_event()
        time.sleep(0.3)
        api.enqueue(queue="b")
        second = sse.next_event()
        assert int(second["id"]) > int(first["id"])
    finally:
        sse.close()
    # Disconnected: activity happens meanwhile.
    api.enqueue(queue="c")
    time.sleep(0.5)
    resumed = open_stream(api, last_event_id=first["id"])
    try:
        replayed = [resumed.next_event(), resumed.next_event()]
        assert [json.loads(e["data"])["queues"] for e in replayed] == [["b"], ["c"]]
        assert replayed[0]["id"] == second["id"]
        api.enqueue(queue="d")  # and it carries on live
        assert json.loads(resumed.next_event()["data"]) == {"queues": ["d"]}
    finally:
        resumed.close()


def test_unknown_last_event_id_gets_resync(api: Api) -> None:
    sse = open_stream(api, last_event_id="1")  # older than anything this server issued
    try:
        frame = sse.next_event(kind="resync")
        assert frame["data"] == "{}"
        api.enqueue(queue="x")
        assert json.loads(sse.next_event()["data"]) == {"queues": ["x"]}
    finally:
        sse.close()


def test_the_broadcaster_subscribes_with_the_first_stream() -> None:
    """A server nobody watches does not subscribe: on PostgreSQL the subscription starts
    the LISTEN that would receive a notification for every commit of the fleet. The
    first stream subscribes (and waits for the source to hear other processes); later
    ones share it, and it stays after they go, so a resuming client's ring holds what
    happened meanwhile."""
    started: list[float] = []
    hub = ActivityHub(lambda: started.append(time.monotonic()),
                      ready=lambda timeout: bool(started))
    threads = set(threading.enumerate())
    broadcaster = EventBroadcaster(hub, coalesce_s=0.05)
    try:
        hub.publish({"before"})
        time.sleep(0.1)
        assert not started and broadcaster.last_id == broadcaster.base
        assert set(threading.enumerate()) == threads  # no thread either
        first: Iterator[str] = stream(broadcaster, None, keepalive_s=0.2)
        assert next(first).startswith(": connected")
        second: Iterator[str] = stream(broadcaster, None, keepalive_s=0.2)
        assert next(second).startswith(": connected")
        assert len(started) == 1
        first.close()
        second.close()
        seen = broadcaster.last_id
        hub.publish({"after"})
        resumed = stream(broadcaster, seen, keepalive_s=0.2)
        next(resumed)
        assert '"queues":["after"]' in next(resumed)
        resumed.close()
    finally:
        broadcaster.stop()


def test_keepalive_and_ring_without_http() -> None:
    """The stream's own logic, with a short keepalive: `:hb` on silence, ids increase,
    nothing reads a database (the broadcaster only ever sees the activity hub)."""
    hub = ActivityHub()
    broadcaster = EventBroadcaster(hub, coalesce_s=0.05, ring_size=4)
    try:
        frames: Iterator[str] = stream(broadcaster, None, keepalive_s=0.1)
        assert next(frames).startswith(": connected")
        assert next(frames) == ":hb\n\n"
        for name in ("q1", "q2", "q1"):
            hub.publish({name})
        frame = next(frames)
        assert "event: queue_activity" in frame and '"queues":["q1","q2"]' in frame
        for i in range(6):  # overflow the ring of 4
            hub.publish({f"r{i}"})
            time.sleep(0.08)
        late = stream(broadcaster, broadcaster.base + 1, keepalive_s=0.1)
        next(late)
        assert "event: resync" in next(late)
    finally:
        broadcaster.stop()
