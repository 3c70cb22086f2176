"""GET /api/v1/events: one Server-Sent Events stream for a whole UI (never per-panel
polling).

The events come from the app's `EventBroadcaster` (`headgate/services/live.py`, a service: its
thread coalesces the store's activity and, on SQLite, looks for other processes'
commits while a stream is open). This module only streams them: a client reconnecting
with `Last-Event-ID` gets what it missed from the broadcaster's ring (replay on attach),
and gets a `:hb` comment after 15 s of silence, so proxies keep the connection and the
client notices a dead one. When a client's id is older than the ring reaches back (a
gap), it is sent one `resync` event first: "you missed activity I no longer have —
refetch what you show".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import flask

from headgate.services.live import EventBroadcaster

from .blueprint import bp
from .context import api_state

KEEPALIVE_S = 15.0


def _frame(event_id: int, queues: tuple[str, ...]) -> str:
    data = json.dumps({"queues": list(queues)}, separators=(",", ":"))
    return f"id: {event_id}\nevent: queue_activity\ndata: {data}\n\n"


def _parse_last_event_id(raw: str | None) -> int | None:
    if raw is None or not re.fullmatch(r"[0-9]{1,19}", raw.strip()):
        return None  # absent or not ours: start live
    return int(raw.strip())


def stream(broadcaster: EventBroadcaster, last_event_id: int | None,
           keepalive_s: float = KEEPALIVE_S) -> Iterator[str]:
    # The server closes this generator when the client goes (at the latest on the next
    # keepalive), which ends the broadcaster's looks at the store with the last stream.
    broadcaster.attach()
    try:
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
    finally:
        broadcaster.detach()


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
