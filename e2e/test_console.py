"""The console in a real browser, as an operator uses it (see conftest.py for the setup).

Screenshots of every page land in e2e/screenshots/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import Server

pytestmark = pytest.mark.e2e

PAGES = [
    ("overview", "/", "Queues"),
    ("jobs", "/jobs", "Jobs"),
    ("dead-letters", "/jobs?state=archived", "Dead letters"),
    ("queue", "/queues/emails", "emails"),
    ("rate-classes", "/rate-classes", "Rate classes"),
    ("concurrency", "/concurrency", "Concurrency limits"),
    ("partitions", "/partitions?queue=emails", "Partitions"),
    ("quarantine", "/quarantine", "Quarantine"),
    ("periodic", "/periodic", "Periodic schedules"),
    ("schedule", "/periodic/nightly-report", "nightly-report"),
    ("workers", "/workers", "Workers"),
    ("cluster", "/cluster", "Cluster"),
    ("not-found", "/jobs/does-not-exist", "Not found"),
]


def live(page: Any) -> None:
    """Wait until the page's socket is up (the pill says so)."""
    expect(page.locator("#live-pill")).to_have_text("live")


def staterow_count(page: Any, state: str) -> Any:
    row = page.locator("#state-counts .staterow").filter(
        has=page.locator(".label", has_text=re.compile(rf"^{state}\b")))
    return row.locator(".n")


def test_every_page_renders_live_and_is_screenshotted(server: Server, page: Any,
                                                      shot: Callable[..., None]) -> None:
    for name, path, heading in PAGES:
        page.goto(server.base + path)
        expect(page.locator("h1").first).to_contain_text(heading)
        live(page)
        shot(page, name)
    # Phone width: the navigation and the jobs list still work.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(server.base + "/")
    live(page)
    shot(page, "phone-overview")
    page.goto(server.base + f"/jobs?state=archived&job={server.seeded.archived[0]}")
    expect(page.locator("#sheet-body")).to_be_visible()
    shot(page, "phone-job-sheet")


def test_search_with_q_updates_the_url_and_explains_errors(server: Server, page: Any,
                                                           shot: Callable[..., None]) -> None:
    page.goto(server.base + "/jobs")
    live(page)
    page.keyboard.press("/")  # focuses the search box
    expect(page.locator("#q")).to_be_focused()
    page.locator("#q").fill("tag:vip")
    page.locator("#q").press("Enter")
    expect(page).to_have_url(re.compile(r"q=tag%3Avip"))
    rows = page.locator("#jobs-table tbody tr")
    expect(rows.first).to_be_visible()
    for kind in rows.locator("td.kind").all_inner_texts():
        assert kind.startswith("send_email")
    # The state sidebar filters in place and keeps the URL shareable.
    page.locator("#state-counts .staterow", has_text="archived").click()
    expect(page).to_have_url(re.compile(r"state=archived"))
    expect(page.locator("h1")).to_contain_text("Dead letters")
    page.locator("#q").fill("color:red")
    page.locator("#q").press("Enter")
    expect(page.locator("#q-error")).to_contain_text("unknown search field `color`")
    shot(page, "search-error")


def test_open_a_job_sheet_then_back_closes_it(server: Server, page: Any,
                                             shot: Callable[..., None]) -> None:
    page.goto(server.base + "/jobs?state=archived")
    live(page)
    page.locator("#jobs-table tbody tr td.id a").first.click()
    expect(page).to_have_url(re.compile(r"job="))
    sheet = page.locator("#job-sheet")
    expect(sheet.locator(".why")).to_contain_text("Dead letter")
    expect(sheet).to_contain_text("Lifecycle")
    expect(sheet).to_contain_text("Attempts with errors")
    sheet.get_by_role("button", name="Show payload").click()
    expect(sheet.locator(".payloadview")).to_contain_text("shown as json")
    shot(page, "job-sheet", full_page=False)
    page.keyboard.press("Escape")  # closes the sheet
    expect(page).not_to_have_url(re.compile(r"job="))
    # The URL changes before the sheet is swapped out: going back in between would file
    # the still-open sheet under the closed page's history entry.
    expect(page.locator("#job-sheet.open")).to_have_count(0)
    page.go_back()  # ...and the back button brings it back
    expect(page).to_have_url(re.compile(r"job="))
    expect(page.locator("#job-sheet.open")).to_have_count(1)
    # Going back reloads the page (the console keeps no history cache). Its HTML shows the
    # sheet before its scripts run, and a second back in that moment is a popstate that
    # nothing handles yet, so wait until the page is live.
    live(page)
    page.go_back()
    expect(page).not_to_have_url(re.compile(r"job="))
    expect(page.locator("#job-sheet.open")).to_have_count(0)


def test_retry_an_archived_job_and_see_its_state_change(server: Server, page: Any) -> None:
    job_id = server.seeded.archived[0]
    page.goto(server.base + f"/jobs?state=archived&job={job_id}")
    live(page)
    sheet = page.locator("#sheet-body")
    expect(sheet.locator(".badge").first).to_have_text("archived")
    sheet.get_by_role("button", name="Retry").dblclick()  # a double click acts once
    expect(page.locator("#flash")).to_contain_text("Retried")
    expect(page.locator("#sheet-body .badge").first).to_have_text("available")
    assert server.api("GET", f"/jobs/{job_id}").json()["state"] == "available"


def test_a_second_click_on_the_re_rendered_sheet_acts_on_nothing(
        server: Server, page: Any) -> None:
    """Retry's answer re-renders the sheet with the requeued job's Cancel where Retry
    was: a double click's second click must not land on it. Done inside the page, so
    the check follows the swap with no round trip between them."""
    job_id = server.seeded.archived[3]
    page.goto(server.base + f"/jobs?state=archived&job={job_id}")
    live(page)
    seen = page.evaluate("""() => new Promise((resolve) => {
        const started = Date.now();
        const check = () => {
          const cancel = [...document.querySelectorAll('#sheet-body button[data-mutation]')]
            .find((b) => b.textContent.trim() === 'Cancel');
          if (!cancel) return;
          ['htmx:afterSwap', 'htmx:oobAfterSwap', 'htmx:afterSettle'].forEach(
            (n) => document.removeEventListener(n, later));
          const disabled = cancel.disabled;
          cancel.click();  // the second click of a double click
          resolve({disabled, ms: Date.now() - started});
        };
        const later = () => setTimeout(check, 0);
        ['htmx:afterSwap', 'htmx:oobAfterSwap', 'htmx:afterSettle'].forEach(
          (n) => document.addEventListener(n, later));
        [...document.querySelectorAll('#sheet-body button[data-mutation]')]
          .find((b) => b.textContent.trim() === 'Retry').click();
    })""")
    assert seen["disabled"], seen
    cancel = page.locator("#sheet-body").get_by_role("button", name="Cancel")
    expect(cancel).to_be_enabled()  # after the double-click interval
    assert server.api("GET", f"/jobs/{job_id}").json()["state"] == "available"


def test_select_rows_and_cancel_them(server: Server, page: Any) -> None:
    # Jobs of its own, in a queue nothing else writes to, kept an hour once finished. The
    # first rows of a seeded queue are not safe to act on: webhooks/available may list
    # one of the demo's every-minute heartbeat-ping ticks first, ticks have retention 0,
    # and a cancelled tick is deleted by the next retention pass (every 10 s), so the
    # check below now and then read a 404.
    created = []
    for i in range(3):
        resp = server.api("POST", "/jobs", json={
            "kind": "select_kind", "payload": "", "queue": "select-e2e",
            "partition_key": f"p{i}", "retention_ms": 3_600_000})
        assert resp.status_code == 201, resp.text
        created.append(resp.json()["id"])
    page.goto(server.base + "/jobs?queue=select-e2e&state=available")
    live(page)
    boxes = page.locator('#jobs-table input[name="ids"]')
    expect(boxes).to_have_count(3)
    assert sorted(boxes.evaluate_all("els => els.map(e => e.value)")) == sorted(created)
    ids, kept = created[:2], created[2]

    def box(job_id: str) -> Any:
        return page.locator(f'#jobs-table input[name="ids"][value="{job_id}"]')

    cancel = page.get_by_role("button", name="Cancel selected")
    expect(cancel).to_be_disabled()
    for job_id in ids:
        box(job_id).check()
    expect(page.locator("#selcount")).to_have_text("2 selected")
    cancel.click()
    expect(page.locator("#flash")).to_contain_text("Cancelled 2 jobs")
    for job_id in ids:
        resp = server.api("GET", f"/jobs/{job_id}")
        assert (resp.status_code, resp.json().get("state")) == (200, "cancelled"), (
            job_id, resp.status_code, resp.text)
    assert server.api("GET", f"/jobs/{kept}").json()["state"] == "available"
    # The list re-rendered: the cancelled rows left the "available" view, the other stayed.
    for job_id in ids:
        expect(box(job_id)).to_have_count(0)
    expect(box(kept)).to_have_count(1)


def test_bulk_dry_run_then_execute(server: Server, page: Any,
                                   shot: Callable[..., None]) -> None:
    page.goto(server.base + "/jobs?queue=notifications&state=available")
    live(page)
    page.locator("details.bulk > summary").click()
    page.locator("#bulk-action").select_option("cancel")
    page.get_by_role("button", name="Count them (dry run)").click()
    panel = page.locator("#bulk-panel")
    expect(panel).to_contain_text("Cancel 4 jobs")
    shot(page, "bulk-confirm", full_page=False)
    panel.get_by_role("button", name=re.compile("Yes, cancel 4 jobs")).click()
    expect(panel).to_contain_text("done", timeout=15_000)
    expect(panel).to_contain_text("4 of ~4 jobs")
    counts = server.api("GET", "/jobs/counts?queue=notifications").json()["counts"]
    assert counts["available"] == 0 and counts["cancelled"] == 4


def test_pausing_a_rate_class_and_a_queue_is_explained(server: Server, page: Any,
                                                       shot: Callable[..., None]) -> None:
    job_id = server.seeded.rate_limited[-1]
    page.goto(server.base + "/rate-classes")
    live(page)
    row = page.locator("tr", has=page.locator("th", has_text=re.compile(r"^smtp")))
    row.get_by_role("button", name="Pause").click()
    expect(page.locator("#flash")).to_contain_text("Rate class paused")
    expect(row.locator(".badge.paused")).to_be_visible()
    page.goto(server.base + f"/jobs?job={job_id}")
    expect(page.locator("#sheet-body .why")).to_contain_text(
        "Waiting for rate class smtp: it is paused")
    shot(page, "explain-rate-class-paused", full_page=False)

    page.goto(server.base + "/")
    live(page)
    qrow = page.locator("#queue-rows tr", has=page.locator("th a", has_text=re.compile("^emails$")))
    qrow.get_by_role("button", name="Pause").click()
    expect(page.locator("#flash")).to_contain_text("Queue paused")
    expect(page.locator("#queue-rows tr", has=page.locator("th a", has_text=re.compile("^emails$")))
           .locator(".badge.paused")).to_be_visible()
    page.goto(server.base + f"/jobs?job={job_id}")
    expect(page.locator("#sheet-body .why")).to_contain_text("Queue emails is paused")
    # Put things back for other tests.
    server.api("POST", "/queues/emails/resume")
    server.api("PUT", "/rate-classes/smtp",
               json={"limit": 5, "window_ms": 1000, "burst": 5, "paused": False})


def test_a_button_morphed_by_a_live_update_reports_what_it_did(
        server: Server, page: Any) -> None:
    """The live update of the change a click made can morph the button into its successor
    (Pause becomes Resume) before the answer arrives: the flash reports the click's own
    action, not the successor's."""
    page.goto(server.base + "/rate-classes")
    live(page)
    row = page.locator("tr", has=page.locator("th", has_text=re.compile(r"^smtp")))

    def answer_late(route: Any) -> None:
        response = route.fetch()  # the server has paused the class: its update goes out
        page.wait_for_timeout(1500)
        route.fulfill(response=response)

    page.route(re.compile(r".*/api/v1/rate-classes/smtp$"), answer_late)
    try:
        row.get_by_role("button", name="Pause", exact=True).click()
        expect(row.get_by_role("button", name="Resume", exact=True)).to_be_visible()
        expect(page.locator("#flash")).to_contain_text("Rate class paused")
    finally:
        page.unroute(re.compile(r".*/api/v1/rate-classes/smtp$"))
        server.api("PUT", "/rate-classes/smtp",
                   json={"limit": 5, "window_ms": 1000, "burst": 5, "paused": False})


def test_release_a_quarantined_fingerprint(server: Server, page: Any) -> None:
    fp = server.seeded.quarantined_fingerprint
    page.goto(server.base + "/quarantine")
    live(page)
    row = page.locator("#quarantine-rows tr", has_text=fp)
    expect(row).to_contain_text("pdf.render")
    row.get_by_role("button", name="Release").click()
    expect(page.locator("#flash")).to_contain_text("Released")
    expect(page.locator("#quarantine-rows")).to_contain_text("Nothing is quarantined")
    job = server.api("GET", f"/jobs/{server.seeded.quarantined_job}").json()
    assert job["state"] == "available"


def test_signal_a_worker(server: Server, page: Any) -> None:
    page.goto(server.base + "/workers")
    live(page)
    row = page.locator("#worker-rows tr", has_text="e2e-worker")
    row.get_by_role("button", name="Quiet").click()
    expect(page.locator("#flash")).to_contain_text("Signal quiet sent")
    expect(page.locator("#worker-rows tr", has_text="e2e-worker")).to_contain_text("→ quiet")
    # Terminate asks twice (no blocking dialog): the first click only arms it.
    term = page.locator("#worker-rows tr", has_text="e2e-worker").get_by_role(
        "button", name="Terminate")
    term.click()
    expect(page.locator("#worker-rows tr", has_text="e2e-worker").locator("button.armed")
           ).to_have_text("Really terminate?")


def test_a_count_changes_live_after_an_enqueue_through_the_api(server: Server,
                                                               page: Any) -> None:
    page.goto(server.base + "/jobs?queue=live-e2e")
    live(page)
    page.evaluate("window.__sameDocument = true")
    before = int(staterow_count(page, "available").inner_text().replace(",", ""))
    for _ in range(3):
        resp = server.api("POST", "/jobs", json={"kind": "live_kind", "payload": "",
                                                 "queue": "live-e2e"})
        assert resp.status_code == 201, resp.text
    expect(staterow_count(page, "available")).to_have_text(str(before + 3))
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    # The overview's totals move too.
    page.goto(server.base + "/")
    live(page)
    waiting = page.locator("#totals .card").filter(has_text="waiting").locator(".big")
    start = int(waiting.inner_text().replace(",", ""))
    server.api("POST", "/jobs", json={"kind": "live_kind", "payload": "", "queue": "live-e2e"})
    # Other jobs arrive on their own too (the demo data's every-minute schedule, run by the
    # server's scheduler), so the card must come to show what the store counts now,
    # which includes the new job.
    deadline = time.monotonic() + 10  # a bound on a broken run, not a measure
    while True:
        stored = server.api("GET", "/jobs/counts").json()["counts"].get("available", 0)
        shown = int(waiting.inner_text().replace(",", ""))
        if shown == stored >= start + 1 or time.monotonic() > deadline:
            break
        page.wait_for_timeout(100)
    assert shown == stored >= start + 1, (start, shown, stored)


def test_read_only_mode_disables_controls(read_only_server: Server, page: Any,
                                          shot: Callable[..., None]) -> None:
    base = read_only_server.base
    page.goto(base + "/")
    expect(page.locator(".banner.ro")).to_contain_text("Read-only mode")
    pause = page.locator("#queue-rows button").first
    expect(pause).to_be_disabled()
    assert "HG_READ_ONLY" in (pause.get_attribute("title") or "")
    shot(page, "read-only")
    page.goto(base + f"/jobs?state=archived&job={read_only_server.seeded.archived[1]}")
    expect(page.get_by_role("button", name="Retry", exact=True)).to_be_disabled()
    page.goto(base + "/rate-classes")
    expect(page.get_by_role("button", name="Save rate class")).to_be_disabled()


def test_a_script_bearing_kind_does_not_execute(server: Server, page: Any) -> None:
    hostile = "<script>alert(1)</script>"
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    resp = server.api("POST", "/jobs", json={
        "kind": hostile, "payload": "PHNjcmlwdD5hbGVydCgyKTwvc2NyaXB0Pg==",
        "queue": "xss-" + hostile, "tags": [hostile], "partition_key": hostile})
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]
    page.goto(server.base + "/jobs?q=kind:" + "%3Cscript%3Ealert(1)%3C%2Fscript%3E")
    expect(page.locator("#jobs-table td.kind").first).to_contain_text(hostile)
    page.goto(server.base + f"/jobs?job={job_id}")
    expect(page.locator(".sheethead h2")).to_have_text(hostile)
    page.get_by_role("button", name="Show payload").click()
    expect(page.locator(".payloadview")).to_contain_text("<script>alert(2)</script>")
    page.goto(server.base + "/")
    expect(page.locator("#queue-rows")).to_contain_text("xss-" + hostile)
    page.wait_for_timeout(300)
    assert dialogs == []


def test_create_a_rate_class_and_a_schedule_through_forms(server: Server, page: Any) -> None:
    page.goto(server.base + "/rate-classes")
    live(page)
    form = page.locator("form", has=page.locator('input[name="window_ms"]'))
    form.locator('input[name="name"]').fill("e2e+class@v1:x")  # a name that needs encoding
    form.locator('input[name="limit"]').fill("7")
    form.locator('input[name="window_ms"]').fill("2000")
    form.get_by_role("button", name="Save rate class").click()
    expect(page.locator("#flash")).to_contain_text("Rate class saved")
    expect(page.locator("#rate-rows")).to_contain_text("e2e+class@v1:x")
    got = {r["name"]: r for r in server.api("GET", "/rate-classes").json()}["e2e+class@v1:x"]
    assert (got["limit_per_window"], got["window_ms"], got["burst"], got["paused"]) == (
        7, 2000, 7, False)
    # A bad value is answered in words, in place.
    form = page.locator("form", has=page.locator('input[name="window_ms"]'))
    form.locator('input[name="name"]').fill("bad")
    form.locator('input[name="limit"]').fill("5")
    form.locator('input[name="window_ms"]').fill("0")
    page.evaluate("document.querySelector('input[name=window_ms]').removeAttribute('min')")
    form.get_by_role("button", name="Save rate class").click()
    expect(form.locator("xpath=..").locator("[data-feedback]")).to_contain_text("window_ms")

    page.goto(server.base + "/periodic")
    live(page)
    form = page.locator("form", has=page.locator('input[name="spec"]'))
    form.locator('input[name="id"]').fill("e2e-every-minute")
    form.locator('input[name="kind"]').fill("e2e_tick")
    form.locator('input[name="spec"]').fill("@every:60000")
    form.locator('textarea[name="payload"]').fill('{"hello": "world"}')
    form.get_by_role("button", name="Save schedule").click()
    expect(page.locator("#flash")).to_contain_text("Schedule saved")
    row = page.locator("#periodic-rows tr", has_text="e2e-every-minute")
    expect(row).to_contain_text("@every:60000")
    row.get_by_role("button", name="Run now").click()
    expect(page.locator("#flash")).to_contain_text("Enqueued one extra run")
    row.get_by_role("link", name="Edit").click()
    # As stored: re-indenting it would save different bytes.
    expect(page.locator('textarea[name="payload"]')).to_have_value('{"hello": "world"}')
    # An every-minute schedule left behind would add jobs under later tests' counts.
    assert server.api("DELETE", "/periodic/e2e-every-minute").status_code == 204


def test_a_dropped_socket_shows_a_banner_and_reconnects(
    e2e_db: Any, page: Any, tmp_path: Any, shot: Callable[..., None]
) -> None:
    from .conftest import kill_server, start_server, stop_server

    db, seeded = e2e_db
    srv = start_server(db, seeded, tmp_path / "a.log")
    port = srv.base.rsplit(":", 1)[1]
    try:
        page.goto(srv.base + "/workers")
        live(page)
        kill_server(srv)
        expect(page.locator("#live-banner")).to_be_visible(timeout=15_000)
        expect(page.locator("#live-pill")).to_have_text("reconnecting…")
        shot(page, "socket-dropped", full_page=False)
        srv = start_server(db, seeded, tmp_path / "b.log", HG_API_ADDR=f"127.0.0.1:{port}")
    finally:
        pass
    try:
        expect(page.locator("#live-pill")).to_have_text("live", timeout=30_000)
        expect(page.locator("#live-banner")).to_be_hidden()
    finally:
        page.goto("about:blank")  # close the socket so the server stops without waiting
        stop_server(srv)


def test_with_api_tokens_the_console_asks_for_a_sign_in(e2e_db: Any, page: Any,
                                                        tmp_path: Any,
                                                        shot: Callable[..., None]) -> None:
    from .conftest import start_server, stop_server

    db, seeded = e2e_db
    srv = start_server(db, seeded, tmp_path / "t.log", HG_API_TOKENS="e2e-token-1")
    try:
        page.goto(srv.base + "/queues/billing")
        expect(page).to_have_url(re.compile(r"/signin\?next="))
        shot(page, "sign-in")
        # No live socket signed out (/live would refuse it), so no "reconnecting…".
        expect(page.locator("#live-banner")).to_have_count(0)
        page.locator("#token").fill("wrong")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("p.error")).to_contain_text("not accepted")
        page.locator("#token").fill("e2e-token-1")
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(re.compile(r"/queues/billing$"))
        assert "e2e-token-1" not in page.url and "e2e-token-1" not in page.content()
        live(page)
        # A mutation made by the page reaches the token-protected API as this session.
        page.get_by_role("button", name="Pause queue").click()
        expect(page.locator("#flash")).to_contain_text("Queue paused")
        stats = requests_get(srv.base + "/api/v1/queues", "e2e-token-1")
        assert next(q for q in stats if q["queue"] == "billing")["paused"] is True
        # The page's own button (with waiting jobs, the "paused" banner offers one too).
        page.locator("#queue-stats .row").get_by_role("button", name="Resume queue").click()
        expect(page.locator("#flash")).to_contain_text("Queue resumed")
        # Pausing a schedule reads it from the API first: as this session, too.
        page.goto(srv.base + "/periodic")
        row = page.locator("#periodic-rows tr", has_text="nightly-report")
        row.get_by_role("button", name="Pause").click()
        expect(page.locator("#flash")).to_contain_text("Schedule paused")
        row = page.locator("#periodic-rows tr", has_text="nightly-report")
        row.get_by_role("button", name="Resume").click()
        expect(page.locator("#flash")).to_contain_text("Schedule resumed")
    finally:
        # Its sockets closed, or the server's graceful stop waits out the keep-alive
        # connections (gunicorn's keepalive, 2 s).
        page.context.close()
        stop_server(srv)


def requests_get(url: str, token: str) -> Any:
    import requests

    resp = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    resp.raise_for_status()
    return resp.json()


# -- periodic schedules keep what they hold ----------------------------------------------------

SCHEDULE_PAYLOADS = {
    "e2e-binary": b"\x00\xff\x10binary",
    "e2e-compact": b'{"a":1,"b":[1,2]}',
    "e2e-big": json.dumps({"rows": ["x" * 100] * 1000}, separators=(",", ":")).encode(),
    "e2e-crlf": b"\nline one\r\nline two\r",
}


def put_schedule(server: Server, schedule_id: str, payload: bytes) -> dict[str, Any]:
    resp = server.api("PUT", f"/periodic/{schedule_id}", json={
        "kind": "e2e_kept", "spec": "@every:3600000", "queue": "e2e-kept",
        "payload": base64.b64encode(payload).decode(), "retention_ms": 123_456,
        "priority": 3, "partition_key": "tenant a", "rate_class": "rc", "max_attempts": 7,
        "on_missed": "backfill", "backfill_limit": 4})
    assert resp.status_code < 300, resp.text
    return stored_schedule(server, schedule_id)


def stored_schedule(server: Server, schedule_id: str) -> dict[str, Any]:
    every = server.api("GET", "/periodic", params={"include_payload": "true"}).json()
    return next(s for s in every if s["id"] == schedule_id)


def test_saving_an_unchanged_schedule_form_keeps_the_schedule(server: Server,
                                                               page: Any) -> None:
    for schedule_id, payload in SCHEDULE_PAYLOADS.items():
        before = put_schedule(server, schedule_id, payload)
        page.goto(server.base + f"/periodic?edit={schedule_id}")
        live(page)
        page.get_by_role("button", name="Save schedule").click()
        expect(page.locator("#flash")).to_contain_text("Schedule saved")
        after = stored_schedule(server, schedule_id)
        assert base64.b64decode(after["payload"]) == payload, schedule_id
        assert after == before, schedule_id
    # Changed text is what gets saved.
    page.goto(server.base + "/periodic?edit=e2e-compact")
    page.locator('textarea[name="payload"]').fill('{"a": 2}')
    page.get_by_role("button", name="Save schedule").click()
    expect(page.locator("#flash")).to_contain_text("Schedule saved")
    assert base64.b64decode(stored_schedule(server, "e2e-compact")["payload"]) == b'{"a": 2}'


def test_pausing_a_schedule_changes_only_paused(server: Server, page: Any) -> None:
    before = put_schedule(server, "e2e-pause", SCHEDULE_PAYLOADS["e2e-binary"])
    page.goto(server.base + "/periodic")
    live(page)
    row = page.locator("#periodic-rows tr", has_text="e2e-pause")
    hidden = before["payload"]
    assert hidden not in page.content()  # payloads are not in pages unless asked for
    row.get_by_role("button", name="Pause").click()
    expect(page.locator("#flash")).to_contain_text("Schedule paused")
    assert hidden not in page.content()
    paused = stored_schedule(server, "e2e-pause")
    assert paused["paused"] is True
    assert {k: v for k, v in paused.items() if k not in ("paused", "next_run_ms")} == {
        k: v for k, v in before.items() if k not in ("paused", "next_run_ms")}
    row = page.locator("#periodic-rows tr", has_text="e2e-pause")
    row.get_by_role("button", name="Resume").click()
    expect(page.locator("#flash")).to_contain_text("Schedule resumed")
    resumed = stored_schedule(server, "e2e-pause")
    assert resumed["paused"] is False
    assert base64.b64decode(resumed["payload"]) == SCHEDULE_PAYLOADS["e2e-binary"]
    assert resumed["retention_ms"] == 123_456


def test_a_schedule_pause_survives_its_row_being_replaced_while_it_reads(
        server: Server, page: Any) -> None:
    """The click reads the schedule before it writes; a live update replacing the row
    meanwhile (as the socket's first push can) must not swallow the click."""
    put_schedule(server, "e2e-swap", SCHEDULE_PAYLOADS["e2e-compact"])
    page.goto(server.base + "/periodic")
    live(page)
    held: list[Any] = []
    reads = re.compile(r"/api/v1/periodic\?include_payload=true$")

    def hold(route: Any) -> None:
        held.append(route)

    page.route(reads, hold)
    page.locator("#periodic-rows tr", has_text="e2e-swap").get_by_role(
        "button", name="Pause").click()
    for _ in range(100):
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the click did not read the schedule"
    # What a live push does: the row's markup again, as new elements (the server's
    # markup, so without the disabled state of the button that is reading).
    page.evaluate("""() => {
        const row = [...document.querySelectorAll('#periodic-rows tr')]
            .find(tr => tr.textContent.includes('e2e-swap'));
        row.outerHTML = row.outerHTML.replace(' disabled=""', '');
        htmx.process(document.getElementById('periodic-rows'));
    }""")
    held[0].continue_()
    expect(page.locator("#flash")).to_contain_text("Schedule paused")
    assert stored_schedule(server, "e2e-swap")["paused"] is True
    page.unroute(reads, hold)
