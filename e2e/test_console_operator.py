"""The console as an operator judges it (issue 23): numbers that hold still, failures
first, every setting removable, phone width too. Real Chromium against a real server on
the demo data set (conftest.py); set-ups another process would make go through the API
or a second store connection to the same SQLite file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

import headgate
from headgate.core import Outcome

from .conftest import Server

pytestmark = pytest.mark.e2e


def live(page: Any) -> None:
    expect(page.locator("#live-pill")).to_have_text("live")


@pytest.fixture
def side(server: Server) -> Iterator[Any]:
    """A second store on the server's file, as another process would hold it."""
    store = headgate.open_store(f"sqlite:///{server.db}", migrate=False)
    yield store
    store.close()


def archive_one(store: Any, queue: str, kind: str, error: str) -> str:
    """A job that really failed its only attempt (a dead letter), in `queue`."""
    job_id = headgate.Client(store).enqueue(kind, b"{}", queue=queue, max_attempts=1)
    for _ in range(200):
        claims = store.admit("e2e-failer", [queue], capacity=1, lease_ms=60_000)
        if claims and claims[0].job.id == job_id:
            store.ack(claims[0], Outcome.RETRY, error=error)
            return job_id
        if claims:
            store.release(claims)
    raise AssertionError("could not claim the job to fail it")


def column_widths(page: Any) -> list[float]:
    return page.eval_on_selector_all(
        "table.queues thead th", "els => els.map(e => e.getBoundingClientRect().width)")


def test_queue_rows_hold_their_columns_and_dead_letters_are_not_depth(
        server: Server, page: Any, side: Any) -> None:
    """Item 1 and 2: a queue with only dead letters reads "empty" with no bar (its dead
    letters are a count beside it); live updates leave every column width as it was."""
    archive_one(side, "e2e-deadonly", "export_ledger", "OSError: disk full")
    page.goto(server.base + "/")
    live(page)
    row = page.locator("#queue-rows tr", has=page.locator("a", has_text="e2e-deadonly"))
    expect(row.locator("td.headline")).to_have_text("empty")
    assert row.locator("svg.depth rect.seg").count() == 0
    expect(row.locator(".count.aside")).to_have_text("1 dead letters")
    busy = page.locator("#queue-rows tr", has=page.locator("a", has_text="emails"))
    assert busy.locator("svg.depth rect.seg").count() >= 1
    before = column_widths(page)
    # Live updates: enqueues into several queues change the words in the rows.
    for i in range(6):
        resp = server.api("POST", "/jobs", json={"kind": "send_email", "queue": "emails",
                                                 "payload": "e30=", "partition_key": f"w{i}"})
        assert resp.status_code == 201, resp.text
    expect(busy.locator(".counts")).to_contain_text("available")
    page.wait_for_timeout(1200)  # a few live frames
    assert column_widths(page) == before
