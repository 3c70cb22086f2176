"""The console as an operator judges it: numbers that hold still, failures
first, every setting removable, phone width too. Real Chromium against a real server on
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


def test_rate_classes_and_limits_can_be_deleted_and_read_in_words(
        server: Server, page: Any) -> None:
    """Item 8: Delete on rate classes and concurrency limits (through the API, with a
    force confirmation when jobs depend on it), the naming rule in the form, windows in
    words, and cron specs read aloud with the next run's clock time."""
    assert server.api("PUT", "/rate-classes/e2e-spare",
                      json={"limit": 2, "window_ms": 60_000}).status_code == 200
    assert server.api("PUT", "/concurrency-limits/e2e-cap",
                      json={"queue": "e2e-capped", "max_concurrent": 1,
                            "on_saturated": "queue"}).status_code == 200
    page.goto(server.base + "/rate-classes")
    live(page)
    row = page.locator("#rate-rows tr", has=page.locator("th", has_text="e2e-spare"))
    expect(row.locator("td.num").first).to_have_text("2 per minute")
    delete = row.get_by_role("button", name="Delete")
    delete.click()
    expect(delete).to_have_text("Delete it? (click again)")
    delete.click()
    expect(page.locator("#flash")).to_contain_text("Rate class deleted")
    expect(row).to_have_count(0)
    assert "e2e-spare" not in [r["name"] for r in server.api("GET", "/rate-classes").json()]
    # A class jobs wait on: the button says so first, then deletes with force=true.
    server.api("PUT", "/rate-classes/e2e-busy", json={"limit": 1, "window_ms": 60_000,
                                                      "paused": True})
    server.api("POST", "/jobs", json={"kind": "send_sms", "queue": "e2e-busy",
                                      "payload": "e30=", "rate_class": "e2e-busy"})
    page.reload()
    live(page)
    busy = page.locator("#rate-rows tr", has=page.locator("th", has_text="e2e-busy"))
    busy.get_by_role("button", name="Delete").click()
    expect(busy.locator("button.armed")).to_have_text("1 jobs wait on it: delete anyway?")
    busy.locator("button.armed").click()
    expect(page.locator("#flash")).to_contain_text("run without a budget")
    assert "e2e-busy" not in [r["name"] for r in server.api("GET", "/rate-classes").json()]
    # The form applies the API's naming rule before sending anything.
    form = page.locator("form", has=page.locator('input[name="window_ms"]'))
    form.locator('input[name="name"]').fill("bad name!")
    form.locator('input[name="limit"]').fill("3")
    assert form.locator('input[name="name"]').evaluate("el => !el.checkValidity()")
    form.get_by_role("button", name="Save rate class").click()
    assert "bad name!" not in [r["name"] for r in server.api("GET", "/rate-classes").json()]

    page.goto(server.base + "/concurrency")
    live(page)
    row = page.locator("tr", has=page.locator("th", has_text="e2e-cap"))
    row.get_by_role("button", name="Delete").click()
    row.get_by_role("button", name="Delete it? (click again)").click()
    expect(page.locator("#flash")).to_contain_text("Limit deleted")
    expect(page.locator("tr", has=page.locator("th", has_text="e2e-cap"))).to_have_count(0)

    page.goto(server.base + "/periodic")
    live(page)
    nightly = page.locator("#periodic-rows tr", has=page.locator("a", has_text="nightly-report"))
    expect(nightly).to_contain_text("every day at 03:00 UTC")
    expect(nightly.locator("td").nth(2)).to_contain_text(re.compile(r"in .+ · .*\d\d:\d\d UTC"))
    digest = page.locator("#periodic-rows tr", has=page.locator("a", has_text="weekday-digest"))
    expect(digest).to_contain_text("weekdays at 08:00 Europe/Paris time")


def test_failures_show_their_error_first_and_can_be_searched_by_it(
        server: Server, page: Any) -> None:
    """Item 3: the dead-letter list has the last error (class and first line) and when
    it failed; `error:` searches by it; the sheet leads with the last error and its
    attempt; the demo's errors fit their jobs."""
    page.goto(server.base + "/jobs?state=archived")
    live(page)
    head = page.locator("#jobs-table thead")
    expect(head).to_contain_text("Last error")
    expect(head).to_contain_text("Failed")
    rows = page.locator("#jobs-table tbody tr.jobrow")
    expect(rows.first.locator("td.lasterr .errclass")).to_be_visible()
    for kind, err in zip(rows.locator("td.kind").all_inner_texts(),
                         rows.locator("td.lasterr").all_inner_texts(), strict=True):
        if kind.startswith("charge_card"):
            assert "SMTP" not in err and "smtp" not in err, err
    page.locator("#q").fill("error:Timeout")
    page.locator("#q").press("Enter")
    expect(page).to_have_url(re.compile(r"q=error%3ATimeout"))
    expect(rows.first).to_be_visible()
    for err in rows.locator("td.lasterr").all_inner_texts():
        assert err.startswith("TimeoutError"), err
    rows.first.locator("td.id a").click()
    sheet = page.locator("#sheet-body")
    first = sheet.locator("section").first
    expect(first).to_have_attribute("aria-label", "Last error")
    expect(first).to_contain_text(re.compile(r"attempt \d+ of \d+"))
    expect(first.locator("pre.err")).to_contain_text("TimeoutError")


def test_a_queue_that_does_not_drain_says_why_and_offers_the_fix(
        server: Server, page: Any) -> None:
    """Item 4: a queue waiting on a paused rate class (like the demo's `notifications`
    on `sms`): its row and its page say so, with a Resume button for the class."""
    assert server.api("PUT", "/rate-classes/e2e-held", json={
        "limit": 3, "window_ms": 60_000, "paused": True}).status_code == 200
    for _ in range(2):
        assert server.api("POST", "/jobs", json={
            "kind": "send_sms", "queue": "e2e-held", "payload": "e30=",
            "rate_class": "e2e-held"}).status_code == 201
    page.goto(server.base + "/queues/e2e-held")
    live(page)
    banner = page.locator("#queue-stats .blocked")
    expect(banner).to_contain_text("because rate class e2e-held is paused")
    page.goto(server.base + "/")
    live(page)
    row = page.locator("#queue-rows tr", has=page.locator("a", has_text="e2e-held"))
    # Nothing of it runs: the headline calls it a stall, with the fix beside it.
    expect(row.locator("td.headline")).to_contain_text("stalled: rate class e2e-held paused")
    note = row.locator(".blocker")
    note.get_by_role("button", name="Resume e2e-held").click()
    expect(page.locator("#flash")).to_contain_text("Rate class resumed")
    rc = {r["name"]: r for r in server.api("GET", "/rate-classes").json()}["e2e-held"]
    assert (rc["paused"], rc["limit_per_window"], rc["window_ms"]) == (False, 3, 60_000)


WATCH = """
window.__hgProblems = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__hgProblems.push("CSP " + e.violatedDirective + " " + (e.sourceFile || "") + ":" +
                           (e.lineNumber || "") + " " + (e.sample || ""));
});
document.addEventListener("htmx:oobErrorNoTarget", function (e) {
  window.__hgProblems.push("htmx:oobErrorNoTarget " + (e.detail.content && e.detail.content.id));
});
"""

SHOT_PAGES = [
    ("overview", "/"), ("jobs", "/jobs"), ("dead-letters", "/jobs?state=archived"),
    ("job-sheet", "/jobs?state=archived&job={archived}"), ("scheduled", "/jobs?state=scheduled"),
    ("queue", "/queues/emails"), ("rate-classes", "/rate-classes"),
    ("concurrency", "/concurrency"), ("partitions", "/partitions"),
    ("quarantine", "/quarantine"), ("periodic", "/periodic"),
    ("schedule", "/periodic/nightly-report"), ("workers", "/workers"), ("cluster", "/cluster"),
    ("not-found", "/no/such/page"), ("job-not-found", "/jobs/does-not-exist"),
]


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
def test_every_page_at_both_widths_is_clean(server: Server, browser: Any, width: int,
                                            height: int) -> None:
    """Every page at 1280×800 and 390×844, through a live update: no console error (a
    CSP violation, htmx:oobErrorNoTarget, a script error) and no sideways scrolling of
    the page body. Screenshots land in e2e/screenshots/ for a person to look at."""
    from .conftest import SCREENSHOTS

    SCREENSHOTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": width, "height": height})
    context.add_init_script(WATCH)
    page = context.new_page()
    page.set_default_timeout(10_000)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(f"pageerror: {exc}"))
    try:
        for name, path in SHOT_PAGES:
            url = server.base + path.format(archived=server.seeded.archived[-1])
            page.goto(url)
            if "not-found" not in name:
                live(page)
            # A live update while the page is open.
            server.api("POST", "/jobs", json={"kind": "send_email", "queue": "emails",
                                              "payload": "e30="})
            page.wait_for_timeout(700)
            found = page.evaluate("window.__hgProblems")
            if "not-found" in name:
                # The browser logs the 404 status of the page itself; nothing else.
                problems[:] = [p for p in problems if "404" not in p]
            assert not problems and not found, (name, problems, found)
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - window.innerWidth")
            page.screenshot(path=str(SCREENSHOTS / f"{width}-{name}.png"), full_page=True)
            assert overflow <= 0, f"{name} scrolls sideways by {overflow}px at {width}px"
    finally:
        context.close()


def steps(page: Any) -> list[str]:
    return page.locator("#sheet-body ol.timeline .what").all_inner_texts()


def test_the_timeline_follows_operator_actions_and_a_deleted_job(
        server: Server, page: Any, side: Any) -> None:
    """Item 6: a retried dead letter keeps its archived step; a cancelled scheduled job
    has no step at a future time; an open sheet notices its job was deleted elsewhere."""
    dead = archive_one(side, "e2e-timeline", "export_ledger", "OSError: disk full")
    assert server.api("POST", f"/jobs/{dead}/retry").status_code in (200, 204)
    page.goto(server.base + f"/jobs?job={dead}")
    live(page)
    assert steps(page)[-2:] == ["archived", "retried"], steps(page)
    future = server.api("POST", "/jobs", json={
        "kind": "charge_card", "queue": "e2e-timeline", "payload": "e30=",
        "scheduled_at_ms": side.now_ms() + 3_600_000}).json()["id"]
    assert server.api("POST", f"/jobs/{future}/cancel").status_code in (200, 204)
    page.goto(server.base + f"/jobs?job={future}")
    live(page)
    assert steps(page) == ["created", "scheduled", "cancelled"], steps(page)
    # Deleted by someone else while its sheet is open.
    assert server.api("DELETE", f"/jobs/{future}").status_code == 204
    expect(page.locator("#sheet-body")).to_contain_text("This job no longer exists")


def test_the_jobs_list_has_room_next_to_the_sheet(server: Server, browser: Any) -> None:
    """Item 7 at 1280×800: with the sheet open nothing is cut off and the buttons keep
    one line; scheduled lists say when each job runs and a scheduled job can run now;
    the sidebar counts follow `queue:` in the search and say when the search is not
    counted; Partitions opens on a queue that has partitions."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        page.goto(server.base + f"/jobs?state=archived&job={server.seeded.archived[0]}")
        live(page)
        wrap = page.locator(".jobs-list .tablewrap")
        assert wrap.evaluate("el => el.scrollWidth <= el.clientWidth"), "table cut off"
        for height in page.locator(".selbar .btn").evaluate_all(
                "els => els.map(e => e.getBoundingClientRect().height)"):
            assert height < 40, height
        page.goto(server.base + "/jobs?state=scheduled")
        live(page)
        expect(page.locator("#jobs-table thead")).to_contain_text("Runs at")
        expect(page.locator("#jobs-table tbody tr").first).to_contain_text("UTC")
        job_id = page.locator("#jobs-table tbody tr.jobrow").first.get_attribute("data-job-id")
        page.locator("#jobs-table tbody tr.jobrow td.id a").first.click()
        page.locator("#sheet-body").get_by_role("button", name="Run now").click()
        expect(page.locator("#flash")).to_contain_text("Due now")
        # Due now: the next admit (or the promoter) makes it available.
        side = headgate.open_store(f"sqlite:///{server.db}", migrate=False)
        try:
            side.promote_due() if hasattr(side, "promote_due") else None
            job = side.get_job(job_id)
            assert job.scheduled_at_ms <= side.now_ms()
        finally:
            side.close()
        page.goto(server.base + "/jobs?q=queue%3Aemails")
        live(page)
        counts = server.api("GET", "/jobs/counts?queue=emails").json()["counts"]
        expect(page.locator("#state-counts")).to_contain_text("in emails")
        avail = page.locator("#state-counts .staterow", has_text="available").locator(".n")
        expect(avail).to_have_text(f"{counts['available']:,}")
        page.goto(server.base + "/jobs?q=tag%3Avip")
        expect(page.locator("#counts-note")).to_contain_text("the search is not counted")
        page.goto(server.base + "/partitions")
        live(page)
        expect(page.locator("#partition-table table")).to_be_visible()
    finally:
        context.close()


def test_rough_edges_are_smoothed(server: Server, page: Any) -> None:
    """Item 10: Esc returns focus to the row; an unknown path gets the console's page;
    "Never mind" takes back the dry run's words; live row updates morph in place, so
    the focused button is the same element afterwards."""
    page.goto(server.base + "/jobs?state=archived")
    live(page)
    link = page.locator("#jobs-table tbody tr td.id a").first
    job_id = page.locator("#jobs-table tbody tr.jobrow").first.get_attribute("data-job-id")
    link.click()
    expect(page.locator("#job-sheet.open")).to_have_count(1)
    page.locator("#sheet-body h3").first.click()  # focus leaves the link
    page.keyboard.press("Escape")
    expect(page.locator("#job-sheet.open")).to_have_count(0)
    focused = page.evaluate("document.activeElement.closest('tr') && "
                            "document.activeElement.closest('tr').dataset.jobId")
    assert focused == job_id

    resp = page.goto(server.base + "/no/such/page")
    assert resp is not None and resp.status == 404
    expect(page.locator("header.top")).to_be_visible()
    expect(page.locator("h1")).to_have_text("Not found")
    expect(page.locator("main")).to_contain_text("There is no console page at /no/such/page")

    page.goto(server.base + "/jobs?queue=webhooks&state=available")
    live(page)
    page.locator("details.bulk > summary").click()
    page.locator("#bulk-action").select_option("cancel")
    page.get_by_role("button", name="Count them (dry run)").click()
    bulk = page.locator("details.bulk")
    expect(bulk.locator("[data-feedback]")).to_have_text("Counted; confirm below.")
    page.get_by_role("button", name="Never mind").click()
    expect(bulk.locator("[data-feedback]")).to_have_text("")

    page.goto(server.base + "/")
    live(page)
    row = page.locator("#queue-rows tr", has=page.locator("a", has_text="webhooks"))
    button = row.get_by_role("button", name="Pause")
    button.focus()
    button.evaluate("el => { el.__hgMark = 'same'; }")
    before = row.locator(".counts").inner_text()
    for i in range(3):
        server.api("POST", "/jobs", json={"kind": "deliver_webhook", "queue": "webhooks",
                                          "payload": "e30=", "partition_key": f"m{i}"})
    expect(row.locator(".counts")).not_to_have_text(before)
    assert page.evaluate("document.activeElement.__hgMark") == "same"


def test_charts_overview_live_fifteen_minutes_hover_and_phone_axes(
        server: Server, browser: Any, page: Any) -> None:
    """Item 5: the overview has a live throughput chart; queue charts start at 15
    minutes; hovering a minute shows its numbers; on a phone the axis text is readable."""
    page.goto(server.base + "/")
    live(page)
    panel = page.locator("#throughput")
    expect(panel.locator("svg.history")).to_be_visible()
    arrived = panel.locator(".legend .line-arrived")
    before = int(re.sub(r"\D", "", arrived.inner_text()))
    for _ in range(3):
        server.api("POST", "/jobs", json={"kind": "send_email", "queue": "emails",
                                          "payload": "e30="})
    page.wait_for_function(  # live: no reload
        "n => parseInt(document.querySelector('#throughput .legend .line-arrived')"
        ".textContent.replace(/\\D/g, '')) >= n", arg=before + 3)
    last = page.locator("#throughput rect.hit").last
    last.hover()
    expect(page.locator("#throughput [data-readout]")).to_contain_text(re.compile(
        r"\d\d:\d\d — arrived \d+ · completed \d+ · failed \d+ · held back \d+ jobs"))
    page.goto(server.base + "/queues/emails")
    expect(page.locator(".seg a[aria-current]")).to_have_text("15m")
    assert page.locator("svg.history rect.hit").count() in (15, 16)

    phone = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        pg = phone.new_page()
        pg.goto(server.base + "/queues/emails")
        heights = pg.locator("svg.history text.axis").evaluate_all(
            "els => els.filter(e => getComputedStyle(e).display !== 'none')"
            ".map(e => e.getBoundingClientRect().height)")
        assert heights and min(heights) >= 8, heights
    finally:
        phone.close()


def test_phone_width_reaches_every_action(server: Server, browser: Any) -> None:
    """Item 9 at 390×844: tables are stacked rows, so every button and the name of each
    row are on screen without sideways scrolling; the navigation wraps instead of being
    cut; an opened sheet's title is not under the header."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        for path in ("/", "/jobs", "/rate-classes", "/concurrency", "/periodic", "/workers",
                     "/quarantine"):
            page.goto(server.base + path)
            live(page)
            off = page.evaluate("""() => [...document.querySelectorAll(
                'table.stack button, table.stack a.btn, table.stack tbody th, .mainnav a')]
                .filter(e => e.offsetParent !== null)
                .filter(e => { const r = e.getBoundingClientRect();
                               return r.left < 0 || r.right > window.innerWidth + 0.5; })
                .map(e => e.textContent.trim().slice(0, 30))""")
            assert off == [], (path, off)
            assert page.evaluate("(() => { const n = document.querySelector('.mainnav');"
                                 " return n.scrollWidth <= n.clientWidth; })()"), path
        page.goto(server.base + "/jobs?state=archived")
        live(page)
        page.locator("#jobs-table tbody tr td.id a").first.click()
        title = page.locator("#job-sheet .sheethead h2")
        expect(title).to_be_visible()
        page.wait_for_timeout(400)  # the sheet scrolls into view
        assert title.evaluate("""el => { const r = el.getBoundingClientRect();
            const hit = document.elementFromPoint(r.left + 5, r.top + r.height / 2);
            return r.top >= 0 && el.contains(hit); }""")
    finally:
        context.close()
