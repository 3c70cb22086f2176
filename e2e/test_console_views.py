"""The operator views Sidekiq, Oban and Hatchet users look for, in real Chromium against
a real `headgate serve`: wait/run time percentiles on a queue's page and a kind's list,
the payload search and the time range on the jobs list, what each worker runs now, and
running jobs whose lease expired marked "orphaned".

This module runs its own server with `--no-duties` on a fresh SQLite file: with the
reclaimer running (every second), a job whose lease expired would be made available
again before the page could show it as orphaned. Set-ups go through a second store on
the same file, as another process would make them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import expect

import headgate
from headgate.core import AckRequest, Outcome
from headgate.core.records import WorkerBeat

from .conftest import Server, free_port, stop_server

pytestmark = pytest.mark.e2e


def start_without_duties(db: str, log: Path) -> Server:
    port = free_port()
    environ = {k: v for k, v in os.environ.items()
               if k not in ("HG_API_TOKENS", "HG_API_READ_TOKENS", "HG_API_TOKENS_FILE",
                            "HG_READ_ONLY", "HG_UI_PREFIX")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "headgate.cli", "serve", "--addr", f"127.0.0.1:{port}",
         "--store", f"sqlite:///{db}", "--threads", "16", "--no-duties"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=environ)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
        try:
            if requests.get(base + "/healthz", timeout=1).status_code == 200:
                return Server(base, db, proc, None)  # type: ignore[arg-type]
        except requests.RequestException:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def views_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("views")
    db = str(folder / "views.db")
    headgate.open_store(f"sqlite:///{db}").close()  # migrated before the server opens it
    srv = start_without_duties(db, folder / "serve.log")
    yield srv
    stop_server(srv)


@pytest.fixture
def side(views_server: Server) -> Iterator[Any]:
    store = headgate.open_store(f"sqlite:///{views_server.db}", migrate=False)
    yield store
    store.close()


def live(page: Any) -> None:
    expect(page.locator("#live-pill")).to_have_text("live")


def beat(store: Any, worker_id: str, queues: list[str]) -> None:
    store.heartbeat(WorkerBeat(worker_id, host="views-host", pid=7, queues=tuple(queues),
                               concurrency=4, inflight=1, polls=10, empty_polls=2,
                               status="running"))


def run_jobs(store: Any, queue: str, worker: str = "views-runner") -> int:
    claims = store.admit(worker, [queue], capacity=100, lease_ms=60_000)
    store.ack_many([AckRequest(c, Outcome.SUCCESS) for c in claims])
    return len(claims)


def test_queue_page_and_kind_list_show_wait_and_run_percentiles(
        views_server: Server, page: Any, side: Any, shot: Callable[[Any, str], None]) -> None:
    client = headgate.Client(side)
    for kind in ("invoice.render", "invoice.render", "invoice.mail"):
        client.enqueue(kind, b"{}", queue="billing")
    client.enqueue("invoice.render", b"{}", queue="reports")
    assert run_jobs(side, "billing") == 3 and run_jobs(side, "reports") == 1

    page.goto(views_server.base + "/queues/billing")
    panel = page.locator("#queue-latency")
    expect(panel.get_by_role("heading")).to_contain_text("Latency by kind")
    rows = panel.locator("tbody tr")
    expect(rows).to_have_count(3)  # all kinds, then each kind
    expect(rows.nth(0)).to_contain_text("all kinds")
    cells = rows.nth(1).locator("th, td")
    expect(cells.nth(0)).to_have_text("invoice.mail")
    expect(cells.nth(1)).to_have_text("1")  # started
    expect(cells.nth(5)).to_have_text("1")  # finished
    expect(rows.nth(2).locator("th")).to_have_text("invoice.render")
    expect(rows.nth(2).locator("td").nth(4)).to_have_text("2")
    for i in (1, 2, 3, 5, 6, 7):  # every percentile is a duration, not "—"
        expect(rows.nth(2).locator("td").nth(i)).to_contain_text("s")
    shot(page, "views-queue-latency")

    # The kind's list heads with the same figures, per queue.
    rows.nth(2).locator("th a").click()
    expect(page).to_have_url(views_server.base + "/jobs?queue=billing&kind=invoice.render")
    page.goto(views_server.base + "/jobs?kind=invoice.render")
    head = page.locator("#kind-latency")
    expect(head.get_by_role("heading")).to_contain_text("Kind invoice.render")
    per_queue = head.locator("tbody tr")
    expect(per_queue).to_have_count(3)
    expect(per_queue.nth(0)).to_contain_text("all queues")
    expect(per_queue.nth(0).locator("td").nth(4)).to_have_text("3")
    expect(per_queue.nth(1).locator("th")).to_have_text("billing")
    expect(per_queue.nth(2).locator("th")).to_have_text("reports")
    shot(page, "views-kind-latency")

    page.goto(views_server.base + "/queues/billing-never-ran")
    expect(page.locator("#queue-latency")).to_have_count(0)  # no such queue: a 404 page
    client.enqueue("idle.kind", b"{}", queue="idle")
    page.goto(views_server.base + "/queues/idle")
    expect(page.locator("#queue-latency .empty-inline")).to_contain_text(
        "No job of this queue started or finished in the last hour")


def test_payload_search_and_time_range_narrow_the_jobs_list(
        views_server: Server, page: Any, side: Any, shot: Callable[[Any, str], None]) -> None:
    client = headgate.Client(side)
    zed = client.enqueue("mail.send", json.dumps({"to": "zed@example.com",
                                                  "items": [{"sku": "Z9"}]}).encode(),
                         queue="outbox")
    amy = client.enqueue("mail.send", json.dumps({"to": "amy@example.com"}).encode(),
                         queue="outbox")
    page.goto(views_server.base + "/jobs")
    live(page)
    page.locator("#q").fill("payload.to:zed@example.com")
    page.locator("#q").press("Enter")
    expect(page).to_have_url(re.compile(r"/jobs\?q=payload\.to%3Azed%40example\.com"))
    rows = page.locator("#jobs-table tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-job-id", zed)

    page.locator("#q").fill("payload:EXAMPLE.com kind:mail.send")
    page.locator("#q").press("Enter")
    expect(rows).to_have_count(2)
    page.locator("#q").fill("payload.items.0.sku:Z9")
    page.locator("#q").press("Enter")
    expect(rows).to_have_count(1)
    # Bulk actions cannot select by payload: the panel says so instead of widening.
    expect(page.locator("details.bulk")).to_contain_text("payload")

    # A term without a value is refused in the API's words, nothing listed.
    page.locator("#q").fill("payload.to:")
    page.locator("#q").press("Enter")
    expect(page.locator("#q-error")).to_contain_text("payload.to: needs a value")
    expect(page.locator("#jobs-table")).to_have_count(0)

    # The time range: enqueued from a minute in the future finds nothing; from before
    # the jobs were enqueued finds both again.
    page.locator("#q").fill("payload:example.com")
    summary = page.locator("#timerange summary")
    summary.click()
    future = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 600))
    past = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 600))
    page.locator("#enqueued_after").fill(future)
    page.locator("#q").press("Enter")
    expect(page.locator(".empty h2")).to_have_text("No jobs match")
    expect(page.locator("#timerange summary .tag")).to_have_text("1 bound")
    shot(page, "views-time-range-empty")
    page.locator("#enqueued_after").fill(past)
    page.locator("#q").press("Enter")
    expect(rows).to_have_count(2)
    expect(page.locator("#enqueued_after")).to_have_value(past)
    shot(page, "views-payload-search")

    # Finished: only finished jobs match a finished range.
    page.locator("#finished_after").fill(past)
    page.locator("#q").press("Enter")
    expect(page.locator(".empty h2")).to_have_text("No jobs match")
    claims = side.admit("views-runner", ["outbox"], capacity=10, lease_ms=60_000)
    side.ack_many([AckRequest(c, Outcome.SUCCESS) for c in claims if c.job.id == amy])
    side.release([c for c in claims if c.job.id != amy])
    page.reload()
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-job-id", amy)

    # A time that does not parse is said in words.
    page.goto(views_server.base + "/jobs?enqueued_before=yesterday")
    expect(page.locator("#q-error")).to_contain_text("enqueued before `yesterday` is not a time")


def test_workers_page_lists_what_each_worker_runs_now_and_follows_it_live(
        views_server: Server, page: Any, side: Any, shot: Callable[[Any, str], None]) -> None:
    client = headgate.Client(side)
    job_id = client.enqueue("video.transcode", b"{}", queue="media")
    beat(side, "views-busy", ["media"])
    (claim,) = side.admit("views-busy", ["media"], capacity=1, lease_ms=120_000)
    assert claim.job.id == job_id

    page.goto(views_server.base + "/workers")
    live(page)
    row = page.locator(f"#running-table tbody tr:has-text('{job_id[-12:]}')")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("video.transcode")
    expect(row).to_contain_text("media")
    expect(row).to_contain_text("views-busy")
    expect(row.locator("td").last).to_contain_text("s")  # running for, e.g. "120 ms"
    expect(row.locator("a")).to_have_attribute("href", f"/jobs?job={job_id}")
    shot(page, "views-workers-running")

    # It finishes in another process: the push channel takes the row away (no reload).
    side.ack(claim, Outcome.SUCCESS)
    expect(row).to_have_count(0, timeout=15_000)


def test_an_orphaned_running_job_is_marked_in_the_list_and_the_sheet(
        views_server: Server, page: Any, side: Any, shot: Callable[[Any, str], None]) -> None:
    client = headgate.Client(side)
    job_id = client.enqueue("ledger.sync", b"{}", queue="ledger")
    (claim,) = side.admit("views-gone", ["ledger"], capacity=1, lease_ms=1)
    assert claim.job.id == job_id
    deadline = time.monotonic() + 10
    while side.now_ms() <= claim.lease_expires_at_ms and time.monotonic() < deadline:
        time.sleep(0.01)  # the lease of 1 ms must have run out before the page reads it
    healthy = client.enqueue("ledger.sync", b"{}", queue="ledger")
    side.admit("views-alive", ["ledger"], capacity=1, lease_ms=120_000)

    page.goto(views_server.base + "/jobs?state=running")
    orphan_row = page.locator(f"#jobs-table tr[data-job-id='{job_id}']")
    expect(orphan_row.locator(".badge.orphaned")).to_have_text("orphaned")
    expect(page.locator(f"#jobs-table tr[data-job-id='{healthy}'] .badge.orphaned")
           ).to_have_count(0)
    shot(page, "views-orphaned-list")

    orphan_row.locator("td.id a").click()
    badge = page.locator("#job-sheet .sheetstate .badge.orphaned")
    expect(badge).to_have_text("orphaned — lease expired, will be reclaimed")
    shot(page, "views-orphaned-sheet")

    # The workers page marks it too.
    page.goto(views_server.base + "/workers")
    expect(page.locator(f"#running-table tr:has-text('{job_id[-12:]}') .badge.orphaned")
           ).to_have_text("orphaned")
