"""Expected starts and what-if in a real browser: the job sheet's and the list's expected
start, and the what-if forms of the rate-class, concurrency and queue pages, whose
answer renders in place without changing anything (also in read-only mode). Real
Chromium against a real server (conftest.py); the set-up goes through the API and a
second store connection to the same SQLite file, as another process would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

import headgate
from headgate.core.records import WorkerBeat

from .conftest import Server

pytestmark = pytest.mark.e2e

Q = "zz-forecast"
CLASS = "zz-fc"
LIMIT = "zz-fc-ceiling"


@pytest.fixture(scope="module")
def waiting(server: Server) -> Iterator[list[str]]:
    """Ten jobs in a 2/s class, a worker that serves their queue (registered by a
    heartbeat; nothing runs them), a ceiling on the queue."""
    side = headgate.open_store(f"sqlite:///{server.db}", migrate=False)
    try:
        side.upsert_rate_class(CLASS, 2, 1000, 2)
        side.upsert_concurrency_limit(LIMIT, Q, 1)
        ids = []
        for i in range(10):
            r = server.api("POST", "/jobs", json={"kind": "e2e.forecast", "queue": Q,
                                                  "rate_class": CLASS, "payload": "e30=",
                                                  "partition_key": f"t{i % 2}"})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        side.heartbeat(WorkerBeat("zz-fc-worker", queues=(Q,), concurrency=4, inflight=0,
                                  status="running"))
        yield ids
    finally:
        side.close()


def beat(server: Server) -> None:
    """Keep the registered worker live (a forecast counts heartbeats of the last 30 s)."""
    side = headgate.open_store(f"sqlite:///{server.db}", migrate=False)
    try:
        side.heartbeat(WorkerBeat("zz-fc-worker", queues=(Q,), concurrency=4, inflight=0,
                                  status="running"))
    finally:
        side.close()


def simulate_in(page: Any, form: Any) -> Any:
    form.locator("button[type=submit]").click()
    answer = form.locator("xpath=following-sibling::div[@data-simulation][1]")
    expect(answer.locator(".simulation-lead")).to_contain_text("Backlog drains in")
    return answer


def rate_class_limit(server: Server) -> int:
    (rc,) = [r for r in server.api("GET", "/rate-classes").json() if r["name"] == CLASS]
    return int(rc["limit_per_window"])


def test_the_sheet_and_the_list_say_when_jobs_start(server: Server, page: Any,
                                                    waiting: list[str]) -> None:
    beat(server)
    page.goto(server.base + f"/jobs?queue={Q}&job={waiting[-1]}")
    expect(page.locator("#expected-start")).to_contain_text("Expected to start in about")
    rows = page.locator("#jobs-table tr.jobrow .expected")
    expect(rows).to_have_count(10)
    expect(rows.first).to_contain_text("starts ")


def test_what_if_on_the_rate_class_page(server: Server, page: Any,
                                        waiting: list[str]) -> None:
    beat(server)
    page.goto(server.base + "/rate-classes")
    form = page.locator("form.whatif")
    form.locator('select[name="rate_class.name"]').select_option(CLASS)
    form.locator('input[name="rate_class.limit"]').fill("4")
    answer = simulate_in(page, form)
    row = answer.locator(f'tr[data-queue="{Q}"] td')
    expect(row.nth(1)).to_have_text("10")
    # 2 at once (the worker's free slots, the bucket's tokens), 8 at 2/s; then at 4/s.
    expect(row.nth(2)).to_contain_text("~4 s")
    expect(row.nth(3)).to_contain_text("~2 s")
    expect(form.locator("xpath=following-sibling::p[@data-feedback][1]")).to_have_text(
        "Simulated; nothing was changed.")
    assert rate_class_limit(server) == 2


def test_what_if_on_the_concurrency_and_queue_pages(server: Server, page: Any,
                                                    waiting: list[str]) -> None:
    beat(server)
    page.goto(server.base + "/concurrency")
    form = page.locator("form.whatif")
    form.locator('select[name="concurrency_limit.name"]').select_option(LIMIT)
    form.locator('input[name="concurrency_limit.max_concurrent"]').fill("3")
    expect(simulate_in(page, form).locator(f'tr[data-queue="{Q}"]')).to_have_count(1)
    page.goto(server.base + f"/queues/{Q}")
    weight, slots = page.locator("form.whatif").nth(0), page.locator("form.whatif").nth(1)
    expect(simulate_in(page, weight).locator(f'tr[data-queue="{Q}"]')).to_have_count(1)
    expect(simulate_in(page, slots).locator(f'tr[data-queue="{Q}"]')).to_have_count(1)
    limits = {c["name"]: c["max_concurrent"]
              for c in server.api("GET", "/concurrency-limits").json()}
    assert limits[LIMIT] == 1
    (queue,) = [q for q in server.api("GET", "/queues").json() if q["queue"] == Q]
    assert queue["weight"] == 1


def test_what_if_works_read_only(read_only_server: Server, page: Any,
                                 waiting: list[str]) -> None:
    beat(read_only_server)
    page.goto(read_only_server.base + "/rate-classes")
    form = page.locator("form.whatif")
    form.locator('select[name="rate_class.name"]').select_option(CLASS)
    form.locator('input[name="rate_class.limit"]').fill("8")
    expect(form.locator("button[type=submit]")).to_be_enabled()
    simulate_in(page, form)
    assert rate_class_limit(read_only_server) == 2
