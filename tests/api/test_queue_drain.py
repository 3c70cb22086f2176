"""GET /api/v1/queues' time to drain is the console's (headgate.core.drain over the
queue's per-minute history), with its 0 and null cases, over real HTTP on both
backends; and the console's queue row says the same number for the same queue."""

from __future__ import annotations

import re
from html import unescape
from typing import TYPE_CHECKING, Any

import headgate
from headgate.core import Envelope, Outcome, drain
from headgate.core.records import WorkerBeat
from headgate.dashboard import present

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

MIN = drain.BUCKET_MS


def record_history(api: Api, queue: str, minutes: int, arrived: int, completed: int,
                   last: tuple[int, int] | None = None) -> None:
    """`minutes` past per-minute buckets at the given counts (the last full minute at
    `last` when given), and the current minute zeroed (the setup's own enqueues counted
    there), written to the store's table."""
    now = api.store.now_ms()
    current = now - now % MIN
    with api.store.db.write() as (conn, _):  # type: ignore[attr-defined]
        conn.execute("DELETE FROM queue_history WHERE queue = ?", (queue,))
        for k in range(minutes, 0, -1):
            a, c = last if (k == 1 and last) else (arrived, completed)
            conn.execute("INSERT INTO queue_history (queue, bucket_ms, arrived, completed) "
                         "VALUES (?, ?, ?, ?)", (queue, current - k * MIN, a, c))


def expected(api: Api, queue: str) -> drain.Forecast:
    """What core/drain.py computes from the store's own history, at the store's now."""
    now = api.store.now_ms()
    counters = api.store.history_counters(now - drain.WINDOW_MS - drain.BUCKET_MS)
    (q,) = [q for q in api.store.queue_stats() if q.queue == queue]
    return drain.queue_forecast(q.by_state, q.paused, counters.get(queue, {}), now)


def api_queue(api: Api, queue: str) -> dict[str, Any]:
    r = api.get("/queues")
    assert r.status_code == 200, r.text
    (q,) = [q for q in r.json() if q["queue"] == queue]
    return q


def between(value: int, a: int, b: int) -> bool:
    """`value` lies between two forecasts taken just before and just after it (the
    forecast moves by a few ms per ms of clock; 1 ms for integer truncation)."""
    return min(a, b) - 1 <= value <= max(a, b) + 1


def test_a_queue_with_history_drains_as_core_drain_computes(api: Api) -> None:
    headgate.Client(api.store).enqueue_many(
        [Envelope(kind="k", payload=b"", queue="mail") for _ in range(120)])
    record_history(api, "mail", 10, arrived=5, completed=40, last=(20, 20))

    before = expected(api, "mail")
    q = api_queue(api, "mail")
    after = expected(api, "mail")
    assert before.trend == after.trend == "draining" == q["drain_trend"]
    assert before.ttd_ms is not None and after.ttd_ms is not None
    assert between(q["time_to_drain_ms"], before.ttd_ms, after.ttd_ms), (q, before, after)
    # The rates are the smoothed ones the number comes from, not the last minute's.
    for field, a, b in (("arrival_rate", before.arrival, after.arrival),
                        ("drain_rate", before.drain, after.drain)):
        assert min(a, b) - 1e-6 <= q[field] <= max(a, b) + 1e-6, (field, q, before, after)
    assert q["quiet_groups"]["time_to_drain_ms"] == q["time_to_drain_ms"]
    # Smoothing keeps the nine draining minutes before a last one that only kept up.
    assert 150_000 < q["time_to_drain_ms"] < 900_000


def test_an_empty_queue_is_zero_and_work_not_due_has_no_forecast(api: Api) -> None:
    c = headgate.Client(api.store)
    c.enqueue("k", b"", queue="done")
    (claim,) = api.store.admit("w", ["done"], capacity=1)
    api.store.ack(claim, Outcome.SUCCESS)
    c.enqueue("k", b"", queue="held", pending=True)
    c.enqueue("k", b"", queue="later", scheduled_at_ms=api.store.now_ms() + 3_600_000)
    for name in ("done", "held", "later"):
        record_history(api, name, 5, arrived=1, completed=10)

    qs = {n: api_queue(api, n) for n in ("done", "held", "later")}
    # Nothing unfinished, or only pending work: 0 (nothing to drain); "empty".
    for name in ("done", "held"):
        assert (qs[name]["time_to_drain_ms"], qs[name]["drain_trend"]) == (0, "empty")
    # Only scheduled work: not empty, and nothing due to drain, so no number.
    assert (qs["later"]["time_to_drain_ms"], qs["later"]["drain_trend"]) == (None, "empty")


def test_a_paused_or_growing_queue_has_no_time_to_drain(api: Api) -> None:
    c = headgate.Client(api.store)
    for _ in range(5):
        c.enqueue("k", b"", queue="stopped")
        c.enqueue("k", b"", queue="flood")
    api.store.set_queue_paused("stopped", True)
    record_history(api, "stopped", 5, arrived=1, completed=10)
    record_history(api, "flood", 5, arrived=40, completed=10)
    stopped, flood = api_queue(api, "stopped"), api_queue(api, "flood")
    assert (stopped["time_to_drain_ms"], stopped["drain_trend"]) == (None, "paused")
    assert (flood["time_to_drain_ms"], flood["drain_trend"]) == (None, "growing")


def headline(page: str, queue: str) -> str:
    """The time-to-drain cell of the queue's row on the overview page, as text."""
    row = re.search(rf'<tr id="{present.dom_id("queue", queue)}".*?</tr>', page, re.S)
    assert row, page[:2000]
    cell = re.search(r'<td class="headline[^"]*">(.*?)</td>', row.group(0), re.S)
    assert cell
    return unescape(re.sub(r"<[^>]+>", " ", cell.group(1))).strip()


def test_the_console_row_and_the_api_agree(api: Api) -> None:
    c = headgate.Client(api.store)
    c.enqueue_many([Envelope(kind="k", payload=b"", queue="reports") for _ in range(300)])
    record_history(api, "reports", 12, arrived=2, completed=8, last=(4, 4))
    # A live worker serves the queue: jobs waiting with none running and no worker is a
    # stall the row names instead of a time to drain.
    api.store.heartbeat(WorkerBeat("reports-1", host="h", pid=1, queues=("reports",),
                                   concurrency=1))

    before = api_queue(api, "reports")
    r = api.get(api.base + "/")
    assert r.status_code == 200
    after = api_queue(api, "reports")
    assert before["drain_trend"] == after["drain_trend"] == "draining"
    shown = headline(r.text, "reports")
    said = {present.duration(before["time_to_drain_ms"]),
            present.duration(after["time_to_drain_ms"])}
    assert any(shown.startswith(f"drains in {d}") for d in said), (shown, said)
