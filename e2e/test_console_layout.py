"""The console's layout measured in a real Chromium, at 1280 px and at 390 px.

Desktop: every table's header cells stand over their own column (their left edges within
a few pixels of the first regular row's cells), and every table fills its panel. Phone:
list tables become stacked rows, nothing scrolls the page sideways, the sections fold
into one menu button, buttons are touch-sized, the keyboard footer is gone. Every page
at both widths also runs without a console error or CSP violation, through a live
update. Screenshots land in e2e/screenshots/layout-<width>-<page>.png (git-ignored) for
a person to look at. Then the small things an operator trips over: plurals, selection
buttons that fit the selected jobs, read-only checkboxes, the sign-in page, a schedule's
own Pause and Edit, and what the console logs when its socket drops.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

import headgate
from headgate.core import State

from .conftest import SCREENSHOTS, Server

pytestmark = pytest.mark.e2e

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
TOLERANCE_PX = 3

# Pages whose list table must be there with rows (the demo data set fills each).
LIST_PAGES = [
    ("queues", "/"), ("jobs", "/jobs"), ("workers", "/workers"), ("periodic", "/periodic"),
    ("rate-classes", "/rate-classes"), ("quarantine", "/quarantine"),
    ("concurrency", "/concurrency"),
]
# Other pages with a table (or that may grow one); any section the navigation links to
# is added at run time, so a new page is measured too.
OTHER_PAGES = [
    ("dead-letters", "/jobs?state=archived"), ("partitions", "/partitions"),
    ("cluster", "/cluster"), ("schedule", "/periodic/nightly-report"),
    ("queue", "/queues/emails"), ("job-sheet", "/jobs?state=archived&job={archived}"),
]

# Violations and htmx's own complaints, recorded from before the first script runs.
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

# Per visible table in <main>: each header cell's column start against the cell of the
# first regular row (no colspan) that starts at the same column, and the widths of the
# header row, a body row, the table's box and its panel's content box.
GEOMETRY = """() => {
  const contentWidth = el => {
    const cs = getComputedStyle(el);
    return el.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  };
  const starts = row => {
    let col = 0;
    return [...row.children].map(cell => {
      const at = col; col += cell.colSpan || 1;
      return {col: at, left: cell.getBoundingClientRect().left,
              text: cell.textContent.trim().slice(0, 24)};
    });
  };
  const shown = [...document.querySelectorAll("main table")].filter(t => t.offsetParent !== null);
  return shown.map(t => {
    const head = t.querySelector("thead tr:last-child");
    const heads = head ? starts(head) : [];
    const ncols = heads.length ? heads[heads.length - 1].col + 1 : 0;
    const rows = [...t.querySelectorAll("tbody tr")].filter(r =>
      r.offsetParent !== null && [...r.children].every(c => (c.colSpan || 1) === 1)
      && r.children.length === ncols);
    const body = rows.length ? starts(rows[0]) : [];
    const mismatches = heads.map(h => {
      const c = body.find(b => b.col === h.col);
      return c ? {head: h.text, dx: Math.abs(h.left - c.left)} : null;
    }).filter(m => m && m.dx > TOL);
    const wrap = t.closest(".tablewrap") || t.parentElement;
    const panel = t.closest(".panel");
    return {
      name: (t.id || t.className || "table") + " [" + heads.map(h => h.text).join("|") + "]",
      columns: ncols, compared: body.length, mismatches,
      table: t.getBoundingClientRect().width,
      headRow: head ? head.getBoundingClientRect().width : 0,
      bodyRow: rows.length ? rows[0].getBoundingClientRect().width : 0,
      wrap: contentWidth(wrap), wrapBox: wrap.getBoundingClientRect().width,
      panel: panel ? contentWidth(panel) : null,
    };
  });
}""".replace("TOL", str(TOLERANCE_PX))

PHONE_CHECKS = """() => {
  const visible = e => e.offsetParent !== null && e.getBoundingClientRect().height > 0;
  const stacks = [...document.querySelectorAll("main table.stack")].filter(visible);
  return {
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    stackedRows: stacks.flatMap(t => [...t.querySelectorAll("tbody tr")])
      .map(r => getComputedStyle(r).display),
    headersOnScreen: stacks.flatMap(t => [...t.querySelectorAll("thead th:not(.sel)")])
      .filter(h => getComputedStyle(h).display !== "none" && h.getBoundingClientRect().right > 0)
      .map(h => h.textContent.trim()),
    offscreen: [...document.querySelectorAll("main a, main button, main input, main summary")]
      .filter(visible).filter(e => { const r = e.getBoundingClientRect();
        return r.left < -0.5 || r.right > window.innerWidth + 0.5; })
      .map(e => e.outerHTML.slice(0, 80)),
    smallButtons: [...document.querySelectorAll("main .btn, header .btn")].filter(visible)
      .filter(e => e.getBoundingClientRect().height < 40)
      .map(e => e.textContent.trim().slice(0, 30) + " "
                + Math.round(e.getBoundingClientRect().height)),
    keysFooter: [...document.querySelectorAll("footer.keys")].filter(visible).length,
    navLinksShown: [...document.querySelectorAll(".mainnav a")].filter(visible).length,
    header: document.querySelector("header.top").getBoundingClientRect().height,
  };
}"""


def live(page: Any) -> None:
    expect(page.locator("#live-pill")).to_have_text("live")


def pages_to_visit(server: Server, page: Any) -> list[tuple[str, str]]:
    """The fixed list plus every section the navigation offers (by its last path part)."""
    out = LIST_PAGES + [(n, p.format(archived=server.seeded.archived[-1]))
                        for n, p in OTHER_PAGES]
    known = {p.split("?")[0] for _, p in out}
    page.goto(server.base + "/")
    for href in page.locator(".mainnav a").evaluate_all("els => els.map(e => e.pathname)"):
        if href not in known:
            out.append(("nav-" + (href.strip("/").replace("/", "-") or "root"), href))
            known.add(href)
    return out


@pytest.fixture
def lists_filled(server: Server) -> None:
    """Every list page has a row to measure, whatever ran before in this session (a
    release test empties the quarantine): a crash loop, for real, in its own queue."""
    if server.api("GET", "/quarantine").json():
        return
    store = headgate.open_store(f"sqlite:///{server.db}", migrate=False)
    try:
        job_id = headgate.Client(store).enqueue("layout.crash", b'{"pages": 1}',
                                                queue="layout-crash")
        for _ in range(20):
            claims = store.admit("layout-crasher", ["layout-crash"], capacity=1, lease_ms=20)
            if claims:
                while store.now_ms() <= claims[0].lease_expires_at_ms:
                    time.sleep(0.005)
                store.reclaim_expired()
            job = store.get_job(job_id)
            if job is not None and job.state is State.QUARANTINED:
                return
            store.reschedule_job(job_id, 0)  # past the crash backoff
        raise AssertionError("the crash loop did not quarantine its job")
    finally:
        store.close()


@pytest.fixture
def watched(browser: Any) -> Iterator[Any]:
    """A context factory whose pages record console errors, warnings and CSP violations."""
    contexts: list[Any] = []

    def open_page(viewport: dict[str, int]) -> tuple[Any, list[str]]:
        context = browser.new_context(viewport=viewport)
        context.add_init_script(WATCH)
        contexts.append(context)
        pg = context.new_page()
        pg.set_default_timeout(10_000)
        problems: list[str] = []
        pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
              if m.type in ("error", "warning") else None)
        pg.on("pageerror", lambda exc: problems.append(f"pageerror: {exc}"))
        return pg, problems

    yield open_page
    for context in contexts:
        context.close()


def check_page_messages(pg: Any, problems: list[str], name: str) -> None:
    found = pg.evaluate("window.__hgProblems")
    assert not problems and not found, (name, problems, found)


def test_desktop_tables_line_up_and_fill_their_panels(server: Server, watched: Any,
                                                       lists_filled: None) -> None:
    """At 1280 px every header cell starts where its column's cells start, and each
    table (header row and body rows) is as wide as its panel, on every page."""
    SCREENSHOTS.mkdir(exist_ok=True)
    pg, problems = watched(DESKTOP)
    measured: dict[str, int] = {}
    for name, path in pages_to_visit(server, pg):
        pg.goto(server.base + path)
        live(pg)
        server.api("POST", "/jobs", json={"kind": "send_email", "queue": "emails",
                                          "payload": "e30="})  # a live update lands
        pg.wait_for_timeout(500)
        tables = pg.evaluate(GEOMETRY)
        pg.screenshot(path=str(SCREENSHOTS / f"layout-1280-{name}.png"), full_page=True)
        for t in tables:
            where = f"{name}: {t['name']}"
            assert not t["mismatches"], f"{where}: headers off their columns {t['mismatches']}"
            assert t["compared"] == 0 or t["compared"] == t["columns"], where
            for part in ("table", "headRow", "bodyRow"):
                if t[part]:
                    assert abs(t[part] - t["wrap"]) <= TOLERANCE_PX, (where, part, t)
            if t["panel"] is not None:
                assert abs(t["wrapBox"] - t["panel"]) <= TOLERANCE_PX, (where, "panel", t)
        measured[name] = sum(t["compared"] for t in tables)
        check_page_messages(pg, problems, name)
        overflow = pg.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name} scrolls sideways by {overflow}px"
    for name, _ in LIST_PAGES:  # each list page really had a row to compare
        assert measured[name] > 0, (name, measured)


def test_phone_tables_stack_and_nothing_scrolls_sideways(server: Server, watched: Any,
                                                         lists_filled: None) -> None:
    """At 390 px: list tables are stacked rows with their header row off screen, no
    page scrolls sideways and no control sits outside the screen, buttons are at least
    40 px high, the keyboard footer is hidden, and the sections are one menu button
    in a one-line header; opening it shows every section on screen."""
    SCREENSHOTS.mkdir(exist_ok=True)
    pg, problems = watched(PHONE)
    for name, path in pages_to_visit(server, pg):
        pg.goto(server.base + path)
        live(pg)
        server.api("POST", "/jobs", json={"kind": "send_email", "queue": "emails",
                                          "payload": "e30="})
        pg.wait_for_timeout(500)
        got = pg.evaluate(PHONE_CHECKS)
        pg.screenshot(path=str(SCREENSHOTS / f"layout-390-{name}.png"), full_page=True)
        assert got["overflow"] <= 0, (name, got["overflow"])
        assert set(got["stackedRows"]) <= {"flex"}, (name, got["stackedRows"])
        assert got["headersOnScreen"] == [], (name, got["headersOnScreen"])
        assert got["offscreen"] == [], (name, got["offscreen"])
        assert got["smallButtons"] == [], (name, got["smallButtons"])
        assert got["keysFooter"] == 0, name
        assert got["navLinksShown"] == 0, name
        assert got["header"] < 70, (name, got["header"])  # one line, not three
        if (name, path) in LIST_PAGES:
            assert got["stackedRows"], f"{name}: no stacked rows at 390 px"
        check_page_messages(pg, problems, name)

    pg.goto(server.base + "/jobs")
    # Select-all is the one header cell a phone keeps: there, and tappable.
    box = pg.locator("#select-all").bounding_box()
    assert box and box["width"] >= 16 and 0 <= box["x"] < PHONE["width"], box
    menu = pg.locator(".navmenu > summary")
    expect(menu).to_have_text(re.compile(r"Jobs$"))
    menu.click()
    links = pg.locator(".mainnav a")
    expect(links.first).to_be_visible()
    boxes = links.evaluate_all("els => els.map(e => { const r = e.getBoundingClientRect();"
                               " return [r.left, r.right, r.height]; })")
    assert all(left >= 0 and right <= PHONE["width"] and h >= 40 for left, right, h in boxes)
    pg.screenshot(path=str(SCREENSHOTS / "layout-390-menu-open.png"))
    pg.get_by_role("link", name="Workers").click()
    expect(pg).to_have_url(re.compile(r"/workers$"))
    expect(pg.locator(".navmenu > summary")).to_have_text(re.compile(r"Workers$"))


def test_phone_charts_are_tall_enough_to_read(server: Server, watched: Any) -> None:
    """A history chart at 390 px is drawn at least 150 px high (it was about 100)."""
    pg, _ = watched(PHONE)
    for path in ("/", "/queues/emails"):
        pg.goto(server.base + path)
        height = pg.locator("svg.history").first.evaluate(
            "el => el.getBoundingClientRect().height")
        assert height >= 150, (path, height)
        # Labels are squeezed back to their shape: as tall as they are wide-ish, readable.
        boxes = pg.locator("svg.history text.axis").evaluate_all(
            "els => els.filter(e => getComputedStyle(e).display !== 'none')"
            ".map(e => { const r = e.getBoundingClientRect(); return [r.width, r.height]; })")
        assert boxes and all(8 <= h <= 16 for _, h in boxes), (path, boxes)
        SCREENSHOTS.mkdir(exist_ok=True)
        name = path.strip("/").replace("/", "-") or "overview"
        pg.locator("figure.chart").first.screenshot(
            path=str(SCREENSHOTS / f"layout-390-chart-{name}.png"))
        assert pg.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def test_a_settled_swap_never_sets_an_inline_style(server: Server, watched: Any) -> None:
    """An element can carry style="" from the CSSOM (a resized textarea, a browser
    extension). htmx used to copy it onto the element's successor when a swap settled,
    which the CSP (style-src 'self') refuses with a console error."""
    pg, problems = watched(DESKTOP)
    pg.goto(server.base + "/jobs?state=archived")
    live(pg)
    pg.evaluate("""() => { const s = document.getElementById('job-sheet');
                           s.style.minHeight = '1px'; s.style.minHeight = ''; }""")
    assert pg.locator("#job-sheet[style]").count() == 1
    pg.locator("#jobs-table tbody tr td.id a").first.click()
    expect(pg.locator("#job-sheet.open")).to_have_count(1)
    pg.wait_for_timeout(300)  # past htmx's settle delay
    check_page_messages(pg, problems, "job sheet swap")


def test_a_one_job_bulk_action_is_singular_and_said_once(server: Server, page: Any) -> None:
    """The dry run of a bulk action on one job offers "Yes, cancel 1 job"; its
    "Counted; confirm below." is said beside the form, not again in a toast."""
    resp = server.api("POST", "/jobs", json={"kind": "layout_one", "queue": "layout-one",
                                             "payload": "e30="})
    assert resp.status_code == 201, resp.text
    page.goto(server.base + "/jobs?queue=layout-one&state=available")
    live(page)
    page.locator("details.bulk > summary").click()
    page.locator("#bulk-action").select_option("cancel")
    page.get_by_role("button", name="Count them (dry run)").click()
    panel = page.locator("#bulk-panel")
    expect(panel.get_by_role("button", name="Yes, cancel 1 job", exact=True)).to_be_visible()
    expect(panel).to_contain_text("Cancel 1 job matching")
    expect(page.locator("details.bulk [data-feedback]")).to_have_text("Counted; confirm below.")
    expect(page.locator("#flash")).not_to_have_class(re.compile(r"\bshow\b"))
    assert "Counted" not in page.locator("#flash").inner_text()
    panel.get_by_role("button", name="Yes, cancel 1 job", exact=True).click()
    expect(page.locator("#flash")).to_contain_text("Started")
    for _ in range(150):  # the operations duty runs it
        counts = server.api("GET", "/jobs/counts?queue=layout-one").json()["counts"]
        if counts["cancelled"] == 1:
            break
        page.wait_for_timeout(100)
    assert counts["cancelled"] == 1, counts


def test_selection_buttons_fit_the_selected_jobs(server: Server, page: Any) -> None:
    """Retry selected stays off while only jobs that cannot be retried are selected
    (an available job); with a cancelled one selected too it is on and retries it.
    Cancel selected likewise stays off for a selection of only cancelled jobs."""
    ids = []
    for i in range(2):
        resp = server.api("POST", "/jobs", json={"kind": "layout_sel", "queue": "layout-sel",
                                                 "payload": "e30=", "partition_key": f"p{i}"})
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    waiting, cancelled = ids
    assert server.api("POST", f"/jobs/{cancelled}/cancel").status_code in (200, 204)
    page.goto(server.base + "/jobs?queue=layout-sel")
    live(page)
    retry = page.get_by_role("button", name="Retry selected")
    cancel = page.get_by_role("button", name="Cancel selected")
    delete = page.get_by_role("button", name="Delete selected")
    box = {j: page.locator(f'#jobs-table input[name="ids"][value="{j}"]') for j in ids}
    expect(retry).to_be_disabled()
    box[waiting].check()
    expect(cancel).to_be_enabled()
    expect(delete).to_be_enabled()
    expect(retry).to_be_disabled()
    assert "None of the selected jobs can be retried" in (retry.get_attribute("title") or "")
    box[cancelled].check()
    expect(retry).to_be_enabled()
    box[waiting].uncheck()
    expect(retry).to_be_enabled()
    expect(cancel).to_be_disabled()
    retry.click()
    expect(page.locator("#flash")).to_contain_text("Retried 1 job.")
    assert server.api("GET", f"/jobs/{cancelled}").json()["state"] == "available"


def test_read_only_leaves_no_selection_or_bulk_control_usable(read_only_server: Server,
                                                                page: Any) -> None:
    page.goto(read_only_server.base + "/jobs?state=archived")
    live(page)
    boxes = page.locator('#jobs-table input[name="ids"]')
    assert boxes.count() > 0
    assert boxes.evaluate_all("els => els.every(e => e.disabled)")
    expect(page.locator("#select-all")).to_be_disabled()
    for name in ("Retry selected", "Cancel selected", "Delete selected"):
        expect(page.get_by_role("button", name=name)).to_be_disabled()
    page.locator("#jobs-table tbody tr td.kind").first.click()  # opens the sheet, selects nothing
    expect(page.locator("#selcount")).to_have_text("Select jobs")
    page.locator("details.bulk > summary").click()
    expect(page.get_by_role("button", name="Count them (dry run)")).to_be_disabled()
    expect(page.locator("#bulk-action")).to_be_disabled()


def test_a_schedule_page_pauses_resumes_and_edits_through_the_api(server: Server,
                                                                  page: Any) -> None:
    """Pause and Resume on the schedule's own page send the whole schedule back with
    only `paused` changed (its payload too, which the page never shows); Edit opens
    the form filled with it."""
    payload = base64.b64encode(b'{"report": "weekly", "to": ["ops@example.com"]}').decode()
    body = {"kind": "layout_report", "spec": "0 4 * * 1", "queue": "reports",
            "payload": payload, "priority": 3, "max_attempts": 4, "on_missed": "run_once"}
    assert server.api("PUT", "/periodic/layout-weekly", json=body).status_code in (200, 204)

    def stored() -> dict[str, Any]:
        listed = server.api("GET", "/periodic?include_payload=true").json()
        return next(s for s in listed if s["id"] == "layout-weekly")

    before = stored()
    page.goto(server.base + "/periodic/layout-weekly")
    live(page)
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(page.get_by_role("button", name="Resume", exact=True)).to_be_visible()
    expect(page.locator(".facts")).to_contain_text("paused")
    after = stored()
    assert after["paused"] is True
    assert {k: v for k, v in after.items() if k != "paused"} == \
        {k: v for k, v in before.items() if k != "paused"}
    page.get_by_role("button", name="Resume", exact=True).click()
    expect(page.get_by_role("button", name="Pause", exact=True)).to_be_visible()
    assert stored()["paused"] is False
    page.get_by_role("link", name="Edit", exact=True).click()
    expect(page).to_have_url(re.compile(r"/periodic\?edit=layout-weekly#edit-schedule$"))
    expect(page.locator('input[name="id"]')).to_have_value("layout-weekly")
    expect(page.locator('input[name="spec"]')).to_have_value("0 4 * * 1")


def test_sign_in_page_shows_no_sections_and_names_every_token_source(
        e2e_db: Any, page: Any, tmp_path: Any) -> None:
    from .conftest import start_server, stop_server

    db, seeded = e2e_db
    srv = start_server(db, seeded, tmp_path / "t.log", HG_API_TOKENS="layout-token")
    try:
        page.goto(srv.base + "/workers")
        expect(page).to_have_url(re.compile(r"/signin\?next="))
        assert page.locator(".mainnav, .navmenu").count() == 0
        assert page.locator("footer.keys").count() == 0
        text = page.locator("main").inner_text()
        for name in ("HG_API_TOKENS", "HG_API_READ_TOKENS", "HG_API_TOKENS_FILE"):
            assert name in text, name
        page.locator("#token").fill("layout-token")
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(re.compile(r"/workers$"))
        expect(page.locator(".mainnav a", has_text="Workers")).to_be_visible()
    finally:
        # Its sockets closed, or the server's graceful stop waits out the keep-alive
        # connections (gunicorn's keepalive, 2 s).
        page.context.close()
        stop_server(srv)


def test_a_dropped_socket_logs_what_failed(e2e_db: Any, browser: Any, tmp_path: Any) -> None:
    """While the server is gone, each failed reconnect logs a sentence naming the
    socket, not "[object Event]"."""
    from .conftest import kill_server, start_server, stop_server

    db, seeded = e2e_db
    srv = start_server(db, seeded, tmp_path / "w.log")
    context = browser.new_context(viewport=DESKTOP)
    messages: list[str] = []
    try:
        pg = context.new_page()
        pg.on("console", lambda m: messages.append(m.text))
        pg.goto(srv.base + "/workers")
        live(pg)
        kill_server(srv)
        expect(pg.locator("#live-pill")).to_have_text("reconnecting…", timeout=15_000)
        pg.wait_for_function("() => true")  # let the console events drain
        deadline = 40
        while not any("live updates" in m for m in messages) and deadline:
            pg.wait_for_timeout(500)
            deadline -= 1
        assert any(re.search(r"live updates: the WebSocket to ws://127\.0\.0\.1:\d+/live "
                             r"failed or dropped", m) for m in messages), messages
        assert not any("[object Event]" in m for m in messages), messages
    finally:
        context.close()
        if srv.proc.poll() is None:
            stop_server(srv)
