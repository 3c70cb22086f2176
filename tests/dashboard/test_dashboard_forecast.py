"""The console's expected starts and what-if forms: the job sheet's sentence, the job
list's cell (one gather per page), and the forms on the rate-class, concurrency and
queue pages. Flask's test client on a real SQLite store at rest; the browser half is
e2e/test_console_forecast.py."""

from __future__ import annotations

import re
from typing import Any

import headgate
from headgate.core.records import WorkerBeat
from headgate.dashboard import present

Q = "mail"


def at_rest(store: Any, waiting: int) -> list[str]:
    """A 5/s class whose burst went to claims nobody runs, `waiting` jobs behind them."""
    producer = headgate.Client(store)
    store.upsert_rate_class("smtp", limit=5, window_ms=1000, burst=5)
    for i in range(5):
        producer.enqueue("send", f"h{i}".encode(), queue=Q, rate_class="smtp")
    assert len(store.admit("w1", [Q], capacity=5, lease_ms=600_000)) == 5
    store.heartbeat(WorkerBeat("w1", queues=(Q,), concurrency=10, inflight=5, status="running"))
    store.upsert_concurrency_limit("per-tenant", Q, 4)
    return [producer.enqueue("send", f"j{i}".encode(), queue=Q, rate_class="smtp")
            for i in range(waiting)]


def test_the_sheet_says_when_the_job_is_expected_to_start(store: Any, client: Any) -> None:
    ids = at_rest(store, 31)
    body = client.get(f"/jobs?job={ids[30]}").get_data(as_text=True)
    m = re.search(r'id="expected-start">Expected to start in about (\d+) s \((\d+)–(\d+) s\)',
                  body)
    assert m, body[:2000]
    about, low, high = map(int, m.groups())
    assert 5 <= about <= 7 and low < about < high


def test_waiting_jobs_on_the_list_show_their_start(store: Any, client: Any) -> None:
    ids = at_rest(store, 12)
    body = client.get(f"/jobs?queue={Q}").get_data(as_text=True)
    cells = re.findall(r'<span class="expected muted small" title="([^"]*)">starts ([^<]*)</span>',
                       body)
    # The twelve waiting jobs have one each; the running ones none.
    assert len(cells) == 12
    assert all(title.startswith("Expected to start") for title, _ in cells)
    assert ids[11][-12:] in body


def test_no_start_is_said_with_its_reason(store: Any, client: Any) -> None:
    ids = at_rest(store, 3)
    store.set_queue_paused(Q, True)
    body = client.get(f"/jobs?job={ids[2]}").get_data(as_text=True)
    assert 'id="expected-start">No expected start: its queue is paused.' in body
    assert present.expected_start({"ms": None, "reason": "no_live_worker"}) == (
        "No expected start: no running worker serves its queue.")


def test_the_policy_pages_offer_what_if(store: Any, client: Any) -> None:
    at_rest(store, 3)
    for path, fields in (("/rate-classes", ('name="rate_class.name"', 'name="rate_class.limit"')),
                         ("/concurrency", ('name="concurrency_limit.name"',
                                           'name="concurrency_limit.max_concurrent"')),
                         (f"/queues/{Q}", ('name="queue.weight"', 'name="worker_slots.add"'))):
        body = client.get(path).get_data(as_text=True)
        assert 'hx-post="/api/v1/simulate"' in body, path
        assert "data-simulation" in body
        for field in fields:
            assert field in body, (path, field)
