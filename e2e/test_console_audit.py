"""The audit log in a real browser: an operator signed in with a named token retries a
job from its sheet, cancels a queue's jobs in bulk and edits a rate class, and the
Audit log page lists the three actions under the token's name (a dedicated server on
its own file, with a tokens file that names the token)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

import headgate
from headgate.dashboard.demo import seed

from .conftest import Server, start_server, stop_server

pytestmark = pytest.mark.e2e

TOKEN = "e2e-audit-token-7f3a"


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("e2e-audit")
    db = str(tmp / "audit.db")
    store = headgate.open_store(f"sqlite:///{db}")
    try:
        seeded = seed(store)
    finally:
        store.close()
    tokens = tmp / "tokens"
    tokens.write_text(f"# operators\n{TOKEN} rw name=ops-alice\n")
    srv = start_server(db, seeded, Path(tmp) / "serve.log", HG_API_TOKENS_FILE=str(tokens))
    yield srv
    stop_server(srv)


def live(page: Any) -> None:
    expect(page.locator("#live-pill")).to_have_text("live")


def test_retry_bulk_cancel_and_rate_class_edit_appear_in_the_audit_log(
        audited: Server, page: Any, shot: Callable[..., None]) -> None:
    srv = audited
    auth = {"Authorization": f"Bearer {TOKEN}"}
    page.goto(srv.base + "/signin")
    page.locator("#token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    live(page)

    # 1. Retry an archived job from its sheet.
    job_id = srv.seeded.archived[0]
    page.goto(srv.base + f"/jobs?job={job_id}")
    live(page)
    page.locator("#sheet-body").get_by_role("button", name="Retry", exact=True).click()
    expect(page.locator("#flash")).to_contain_text("Retried")
    assert srv.api("GET", f"/jobs/{job_id}", headers=auth).json()["state"] == "available"
    # The sheet lists what was done to the job, and by whom.
    expect(page.locator("#sheet-body .sheet-audit")).to_contain_text("job.retry by ops-alice")

    # 2. Cancel a queue's available jobs in bulk: dry run, then confirm.
    page.goto(srv.base + "/jobs?queue=notifications&state=available")
    live(page)
    page.locator("details.bulk > summary").click()
    page.locator("#bulk-action").select_option("cancel")
    page.get_by_role("button", name="Count them (dry run)").click()
    panel = page.locator("#bulk-panel")
    panel.get_by_role("button", name=re.compile(r"^Yes, cancel")).click()
    expect(panel).to_contain_text("done", timeout=15_000)

    # 3. Edit a rate class with its form.
    page.goto(srv.base + "/rate-classes?edit=webhooks")
    live(page)
    form = page.locator("form", has=page.locator('input[name="window_ms"]'))
    form.locator('input[name="limit"]').fill("33")
    form.get_by_role("button", name="Save rate class").click()
    expect(page.locator("#flash")).to_contain_text("Rate class saved")
    # The rate classes page shows its recent changes.
    expect(page.locator(".audit-table")).to_contain_text("rate_class:webhooks")

    # The Audit log page, from the nav: the three actions, newest first, by ops-alice.
    page.locator("nav.mainnav").get_by_role("link", name="Audit log").click()
    expect(page).to_have_url(re.compile(r"/audit$"))
    rows = page.locator("tr.audit-entry")
    expect(rows).to_have_count(3)
    expect(rows.nth(0).locator(".audit-action")).to_have_text("rate_class.edit")
    expect(rows.nth(0).locator(".audit-target")).to_have_text("rate_class:webhooks")
    expect(rows.nth(0).locator(".audit-summary")).to_have_text("limit 20 → 33")
    expect(rows.nth(1).locator(".audit-action")).to_have_text("bulk.cancel")
    expect(rows.nth(1).locator(".audit-summary")).to_contain_text("queue=notifications")
    expect(rows.nth(2).locator(".audit-action")).to_have_text("job.retry")
    expect(rows.nth(2).locator(".audit-target")).to_have_text(f"job:{job_id}")
    for i in range(3):
        expect(rows.nth(i).locator(".audit-actor")).to_have_text("ops-alice")
    assert TOKEN not in page.content()
    shot(page, "audit-log")

    # The filter narrows the list; the target links back to the job's sheet.
    page.locator('select[name="action"]').select_option("job.retry")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    rows.nth(0).locator(".audit-target a").click()
    expect(page).to_have_url(re.compile(r"/jobs\?job="))
    expect(page.locator(".sheethead")).to_contain_text(job_id)
