"""The console says what is true, in a real browser: a stall in the headline within a
push, undecodable jobs retried, attempts labelled by what they led to, rejections as
jobs, new jobs offered on the list, the list reloaded after a bulk operation, the
blocker's partition and its fix on the sheet. Real Chromium against a real server on
the demo data set (conftest.py); set-ups another process would make go through the API
or a second store connection to the same SQLite file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

import headgate
from headgate.core import Outcome
from headgate.core.records import WorkerBeat

from .conftest import Server

pytestmark = pytest.mark.e2e

# One live push is at most a frame (0.25 s) or a tick (2 s) away; a minute is what the
# smoothed trend took. Waits are bounded well below it.
PUSH_MS = 8_000


def live(page: Any) -> None:
    expect(page.locator("#live-pill")).to_have_text("live")


@pytest.fixture
def side(server: Server) -> Iterator[Any]:
    """A second store on the server's file, as another process would hold it."""
    store = headgate.open_store(f"sqlite:///{server.db}", migrate=False)
    yield store
    store.close()


def enqueue(server: Server, queue: str, n: int = 1, **fields: Any) -> list[str]:
    ids = []
    for _ in range(n):
        r = server.api("POST", "/jobs", json={"kind": "e2e.truth", "queue": queue,
                                              "payload": "e30=", **fields})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


def run_to(store: Any, queue: str, outcome: Outcome, error: str | None = None) -> str:
    """Admit the only waiting job of `queue` and ack it with `outcome`."""
    (claim,) = store.admit("e2e-truth-runner", [queue], capacity=1, lease_ms=60_000)
    store.ack(claim, outcome, error=error)
    return str(claim.job.id)


def queue_row(page: Any, queue: str) -> Any:
    return page.locator("#queue-rows tr", has=page.locator("th a", has_text=re.compile(
        rf"^{re.escape(queue)}$")))


def test_a_paused_rate_class_stalls_the_headline_within_a_push(
        server: Server, page: Any, side: Any) -> None:
    """Item 2: the row read "keeping up" for a minute after its rate class was paused;
    now the next push names the class, with Resume beside it."""
    side.heartbeat(WorkerBeat("e2e-truth-worker", queues=("e2e-mail",), concurrency=4,
                              status="running"))
    assert server.api("PUT", "/rate-classes/e2e-smtp", json={
        "limit": 1000, "window_ms": 1000, "burst": 1000}).status_code == 200
    for _ in range(3):
        enqueue(server, "e2e-mail", rate_class="e2e-smtp")
        run_to(side, "e2e-mail", Outcome.SUCCESS)
    page.goto(server.base + "/")
    live(page)
    headline = queue_row(page, "e2e-mail").locator("td.headline")
    expect(headline).not_to_contain_text("stalled")
    assert server.api("PUT", "/rate-classes/e2e-smtp", json={
        "limit": 1000, "window_ms": 1000, "burst": 1000, "paused": True}).status_code == 200
    enqueue(server, "e2e-mail", 2, rate_class="e2e-smtp")
    expect(headline).to_contain_text("stalled: rate class e2e-smtp paused", timeout=PUSH_MS)
    expect(headline).to_contain_text("2 waiting, none running")
    headline.get_by_role("button", name="Resume e2e-smtp").click()
    expect(page.locator("#flash")).to_contain_text("Rate class resumed")
    expect(headline).not_to_contain_text("stalled", timeout=PUSH_MS)
    rc = {r["name"]: r for r in server.api("GET", "/rate-classes").json()}["e2e-smtp"]
    assert rc["paused"] is False


def test_an_undecodable_job_is_retried_from_its_sheet(server: Server, page: Any,
                                                      side: Any) -> None:
    """Item 3: once the handler is deployed, the sheet's Retry runs it again."""
    enqueue(server, "e2e-undec")
    job_id = run_to(side, "e2e-undec", Outcome.UNDECODABLE, "no handler for e2e.truth")
    page.goto(server.base + f"/jobs?job={job_id}")
    live(page)
    sheet = page.locator("#sheet-body")
    expect(sheet.locator(".badge").first).to_have_text("undecodable")
    expect(sheet.locator(".why")).to_contain_text("Deploy the handler, then retry it")
    sheet.get_by_role("button", name="Retry").click()
    expect(page.locator("#flash")).to_contain_text("Retried")
    expect(page.locator("#sheet-body .badge").first).to_have_text("available")
    assert server.api("GET", f"/jobs/{job_id}").json()["state"] == "available"


def test_the_last_attempt_reads_archived_not_retry(server: Server, page: Any,
                                                   side: Any) -> None:
    """Item 4: a job with max_attempts=1 that failed lists one attempt, archived."""
    enqueue(server, "e2e-once", max_attempts=1)
    job_id = run_to(side, "e2e-once", Outcome.RETRY, "ValueError: declined")
    page.goto(server.base + f"/jobs?job={job_id}")
    live(page)
    items = page.locator("#sheet-body ol.errors > li")
    expect(items).to_have_count(1)
    expect(items.first.locator(".errhead strong")).to_have_text("attempt 1 of 1")
    expect(items.first.locator(".attempt-label")).to_have_text(
        "failed → archived: no attempts left")


def test_the_rejection_strip_counts_jobs(server: Server, page: Any, side: Any) -> None:
    """Item 5: twenty polls over 3 held jobs read 3 jobs held back, not 60."""
    assert server.api("PUT", "/rate-classes/e2e-held3", json={
        "limit": 1, "window_ms": 60_000, "paused": True}).status_code == 200
    enqueue(server, "e2e-held3", 3, rate_class="e2e-held3")
    for _ in range(20):
        assert side.admit("e2e-poller", ["e2e-held3"], capacity=4) == []
    page.goto(server.base + "/queues/e2e-held3")
    live(page)
    legend = page.locator("figcaption.legend")
    expect(legend).to_contain_text("jobs held back, peak minute:")
    expect(legend.locator(".rej-rate_class")).to_have_text("rate class 3")


def test_new_jobs_are_offered_and_a_bulk_operation_reloads_the_list(
        server: Server, page: Any) -> None:
    """Item 6: the list says "N new jobs — show" as they arrive (no reload), and a
    finished bulk operation reloads the list it changed."""
    enqueue(server, "e2e-fresh", 2)
    page.goto(server.base + "/jobs?queue=e2e-fresh&state=available")
    live(page)
    rows = page.locator("#jobs-table tr.jobrow")
    expect(rows).to_have_count(2)
    prompt = page.locator("#new-jobs")
    expect(prompt).to_be_hidden()
    enqueue(server, "e2e-fresh", 3)
    expect(prompt).to_have_text("3 new jobs — show", timeout=PUSH_MS)
    prompt.get_by_role("link").click()
    expect(rows).to_have_count(5)
    expect(page.locator("#new-jobs")).to_be_hidden()

    page.locator("details.bulk > summary").click()
    page.locator("#bulk-action").select_option("cancel")
    page.get_by_role("button", name="Count them (dry run)").click()
    panel = page.locator("#bulk-panel")
    panel.get_by_role("button", name=re.compile("Yes, cancel 5 job")).click()
    expect(panel).to_contain_text("done", timeout=15_000)
    # Nobody clicked "Reload the list": the cancelled jobs left the available list.
    expect(page.locator("#job-list")).to_contain_text("No jobs match", timeout=PUSH_MS)
    expect(page.locator("#flash")).to_contain_text("the list is reloaded")


def test_the_sheet_names_the_blocker_and_offers_its_fix(server: Server, page: Any,
                                                        side: Any) -> None:
    """Item 7: a pending job is asked the same question as the others; the sheet of a
    job under a paused rate class offers Resume; the concurrency blocker names the
    partition at its limit."""
    (pending,) = enqueue(server, "e2e-pend", pending=True)
    page.goto(server.base + f"/jobs?job={pending}")
    live(page)
    expect(page.locator("#sheet-body .why h3")).to_have_text("Why is it not running?")

    assert server.api("PUT", "/rate-classes/e2e-sheet", json={
        "limit": 5, "window_ms": 60_000, "paused": True}).status_code == 200
    (held,) = enqueue(server, "e2e-sheetq", rate_class="e2e-sheet")
    page.goto(server.base + f"/jobs?job={held}")
    live(page)
    why = page.locator("#sheet-body .why")
    expect(why).to_contain_text("it is paused")
    why.get_by_role("button", name="Resume e2e-sheet").click()
    expect(page.locator("#flash")).to_contain_text("Rate class resumed")
    rc = {r["name"]: r for r in server.api("GET", "/rate-classes").json()}["e2e-sheet"]
    assert (rc["paused"], rc["limit_per_window"]) == (False, 5)

    assert server.api("PUT", "/concurrency-limits/e2e-one", json={
        "queue": "e2e-cc", "max_concurrent": 1, "on_saturated": "queue"}).status_code == 200
    enqueue(server, "e2e-cc", 2, partition_key="acme")
    assert len(side.admit("e2e-truth-runner", ["e2e-cc"], capacity=2,
                          lease_ms=120_000)) == 1
    page.goto(server.base + "/")
    live(page)
    headline = queue_row(page, "e2e-cc").locator("td.headline")
    expect(headline).to_contain_text("concurrency limit e2e-one full in partition acme")
    expect(headline.get_by_role("link", name="Partitions")).to_be_visible()
