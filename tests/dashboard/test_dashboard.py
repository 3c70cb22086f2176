"""Server-side tests of the console: pages, fragments, words, escaping, 404s, read-only,
sign-in, and the live hub. Fast (Flask's test client on a real SQLite store); the
browser-level behaviour is in e2e/.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import threading
import time
from typing import Any

import flask
import pytest
from support import console_app, serving, wait_for

import headgate
import headgate.dashboard
from headgate.core import Explanation, Outcome, State
from headgate.core.records import WorkerBeat
from headgate.dashboard import live, present
from headgate.dashboard.demo import Seeded, seed
from headgate.dashboard.query import JobQuery
from headgate.services.config import Settings
from headgate.web import begin_stopping, create_app

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture
def seeded(store: Any) -> Seeded:
    return seed(store)


def make_client(store: Any, db: str, **settings: Any) -> Any:
    return console_app(store, db, **settings).test_client()


def text_of(resp: Any) -> str:
    return resp.get_data(as_text=True)


# -- pages --------------------------------------------------------------------------------

PAGES = {
    "/": ["Queues", "Time to drain", "emails", "dead letters"],
    "/jobs": ["Jobs", "Search syntax", "archived", "send_email"],
    "/jobs?state=archived": ["Dead letters", "charge_card"],
    "/queues/emails": ["History", "arrived", "rate class", "Enqueue limit"],
    "/rate-classes": ["smtp", "webhooks", "tokens", "paused"],
    "/concurrency": ["reports-per-tenant", "reports", "queue"],
    "/partitions?queue=emails": ["Partitions", "acme", "hooli"],
    "/quarantine": ["pdf.render", "Release"],
    "/periodic": ["nightly-report", "0 3 * * *", "Run now"],
    "/periodic/nightly-report": ["Enqueue events", "render_report"],
    "/workers": ["Workers", "No live workers"],
    "/cluster": ["Queue coverage", "no live worker"],
}


@pytest.mark.parametrize("url", sorted(PAGES))
def test_every_page_renders_with_its_key_content(client: Any, seeded: Seeded, url: str) -> None:
    resp = client.get(url)
    assert resp.status_code == 200, text_of(resp)[:500]
    body = text_of(resp)
    for needle in PAGES[url]:
        assert needle in body, (url, needle)
    assert resp.headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert resp.headers["Cache-Control"] == "no-store"
    # One live socket per page, and every page carries the CSRF value for headgate.js.
    assert body.count("ws-connect=") == 1
    assert 'name="hg-csrf"' in body


def test_empty_store_pages_say_what_to_do_next(client: Any) -> None:
    assert "No queues yet" in text_of(client.get("/"))
    assert "No jobs yet" in text_of(client.get("/jobs"))
    assert "Nothing is quarantined" in text_of(client.get("/quarantine"))
    assert "No rate classes" in text_of(client.get("/rate-classes"))
    assert "No schedules yet" in text_of(client.get("/periodic"))
    assert "No live workers" in text_of(client.get("/workers"))


def test_mutation_controls_target_the_api_with_json_bodies(client: Any, seeded: Seeded) -> None:
    body = text_of(client.get("/"))
    assert 'hx-post="/api/v1/queues/emails/pause"' in body
    rates = text_of(client.get("/rate-classes"))
    # Pause/resume of a rate class is a PUT of its numbers with paused flipped.
    assert 'hx-put="/api/v1/rate-classes/smtp"' in rates
    m = re.search(r"hx-put=\"/api/v1/rate-classes/smtp\"[^>]*data-body='([^']*)'", rates)
    assert m and json.loads(m.group(1).replace("&#34;", '"')) == {
        "limit": 5, "window_ms": 1000, "burst": 5, "paused": True}


def test_names_are_one_path_segment_in_api_urls(store: Any, client: Any) -> None:
    headgate.Client(store).enqueue("k", b"", queue="a/b c?d")
    body = text_of(client.get("/"))
    assert 'hx-post="/api/v1/queues/a%2Fb%20c%3Fd/pause"' in body


# -- jobs: search, pagination, sheet -------------------------------------------------------

def test_search_grammar_errors_are_shown_in_words(client: Any, seeded: Seeded) -> None:
    body = text_of(client.get("/jobs?q=color:red"))
    assert "This search cannot run: unknown search field `color`" in body
    body = text_of(client.get("/jobs?q=priority:high"))
    assert "priority `high` is not a number" in body
    body = text_of(client.get("/jobs?state=exploded"))
    assert "unknown state" in body


def test_search_filters_by_fields_and_kind_prefix(client: Any, seeded: Seeded) -> None:
    body = text_of(client.get("/jobs?q=tag:vip"))
    assert "send_email" in body and "render_report" not in body
    body = text_of(client.get("/jobs?q=render_"))
    assert "render_report" in body and "send_email" not in body
    body = text_of(client.get(f"/jobs?q=fingerprint:{seeded.quarantined_fingerprint}"))
    assert "pdf.render" in body


def test_a_search_that_stops_at_its_bound_says_so_and_goes_on(
        store: Any, client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition no job of the newest stretch has: the page says it stopped at its
    limit, and its link finds the match further down."""
    from headgate.adapters.shared import job_pages

    c = headgate.Client(store)
    old = c.enqueue("k", b"", queue="mail", partition_key="tenant-rare")
    for i in range(12):
        c.enqueue("k", b"", queue="mail", partition_key=f"tenant-{i}")
    monkeypatch.setattr(job_pages, "SCAN_LIMIT", 5)
    body = text_of(client.get("/jobs?queue=mail&q=partition:tenant-rare"))
    assert "This search looked at its limit of jobs" in body and old not in body
    ids: set[str] = set()
    for _ in range(5):
        more = re.search(r'<a href="([^"]+)">search further</a>', body)
        if more is None:
            break
        ids |= listed_ids(client, more.group(1))
        body = text_of(client.get(html.unescape(more.group(1))))
    assert ids == {old}


def listed_ids(client: Any, href: str) -> set[str]:
    """The job ids the Jobs page behind `href` (as found in a page) lists."""
    body = text_of(client.get(html.unescape(href)))
    assert "This search cannot run" not in body
    return set(re.findall(r'class="jobrow">\s*<td class="sel"><input type="checkbox" '
                          r'name="ids" value="([^"]*)"', body))


def test_links_to_jobs_by_a_name_with_spaces_lead_to_those_jobs(store: Any,
                                                                client: Any) -> None:
    c = headgate.Client(store)
    store.upsert_rate_class("rc sp ace", 10, 1000)
    store.upsert_rate_class("rc", 10, 1000)
    store.upsert_schedule({"id": "s", "kind": "kind sp ace", "spec": "@every:60000",
                           "queue": "q sp ace"})
    wanted = c.enqueue("kind sp ace", b"{}", queue="q sp ace", partition_key="tenant sp ace",
                       tags=["tag sp ace"], rate_class="rc sp ace")
    # Decoys matching only the first word of each name (what a split `q` would find).
    c.enqueue("kind", b"{}", queue="q sp ace", partition_key="tenant", tags=["tag"],
              rate_class="rc")
    rates = text_of(client.get("/rate-classes"))
    link = re.search(r'<th scope="row" class="name">rc sp ace.*?<a href="([^"]*)"', rates, re.S)
    assert link and listed_ids(client, link.group(1)) == {wanted}
    sheet = text_of(client.get(f"/jobs?job={wanted}"))
    tag = re.search(r'<a class="tag" href="([^"]*)">tag sp ace</a>', sheet)
    assert tag and listed_ids(client, tag.group(1)) == {wanted}
    parts = text_of(client.get("/partitions?queue=q+sp+ace"))
    part = re.search(r'<a href="([^"]*)">tenant sp ace</a>', parts)
    assert part and listed_ids(client, part.group(1)) == {wanted}
    sched = text_of(client.get("/periodic/s"))
    its = re.search(r'<a class="btn" href="([^"]*)">Its jobs</a>', sched)
    assert its and listed_ids(client, its.group(1)) == {wanted}


def test_an_exact_filter_shows_can_be_removed_and_survives_paging(store: Any,
                                                                  client: Any) -> None:
    c = headgate.Client(store)
    for i in range(55):
        c.enqueue("k", b"%d" % i, queue="q", tags=["a b"])
    c.enqueue("k", b"", queue="q", tags=["other"])
    body = text_of(client.get("/jobs?tag=a+b"))
    assert body.count('class="jobrow"') == 50
    assert re.search(r'Only jobs with tag <span class="tag">a b</span>', body)
    assert '<input type="hidden" name="tag" value="a b">' in body  # a new search keeps it
    nxt = re.search(r'href="(/jobs\?[^"]*cursor=[^"]*)"', body)
    assert nxt and "tag=a+b" in nxt.group(1)
    assert len(listed_ids(client, nxt.group(1))) == 5
    assert 'href="/jobs" aria-label="remove the tag filter a b"' in body


def test_pagination_uses_the_opaque_cursor(store: Any, client: Any) -> None:
    c = headgate.Client(store)
    for i in range(60):
        c.enqueue("bulk_kind", str(i).encode(), queue="many")
    first = text_of(client.get("/jobs?queue=many"))
    assert first.count('class="jobrow"') == 50
    cursor = re.search(r'href="/jobs\?[^"]*cursor=([^"&]+)', first)
    assert cursor
    second = text_of(client.get(f"/jobs?queue=many&cursor={cursor.group(1)}"))
    assert second.count('class="jobrow"') == 10
    assert "First page" in second


def test_job_sheet_shows_lifecycle_errors_and_only_permitted_actions(
    client: Any, seeded: Seeded
) -> None:
    body = text_of(client.get(f"/jobs?state=archived&job={seeded.archived[0]}"))
    assert "Lifecycle" in body and "Attempts with errors" in body
    assert "ValueError" in body or "ConnectionRefusedError" in body or "Error" in body
    assert f'/api/v1/jobs/{seeded.archived[0]}/retry' in body
    assert f'/api/v1/jobs/{seeded.archived[0]}/cancel' not in body  # not from archived
    assert "Show payload" in body and "scan-0042" not in body  # payload hidden
    running = text_of(client.get(f"/jobs?job={seeded.running[0]}"))
    assert "Progress" in running and "rendering page" in running
    assert f'/api/v1/jobs/{seeded.running[0]}/cancel' in running
    assert f'/api/v1/jobs/{seeded.running[0]}/retry' not in running
    assert "Latest output" in running and "pages_done" in running
    pending = text_of(client.get(f"/jobs?job={seeded.pending[0]}"))
    assert f'/api/v1/jobs/{seeded.pending[0]}/promote' in pending
    quarantined = text_of(client.get(f"/jobs?job={seeded.quarantined_job}"))
    assert f"/api/v1/quarantine/{seeded.quarantined_fingerprint}" in quarantined


def test_sheet_explains_a_rate_limited_job_with_its_numbers(store: Any, client: Any) -> None:
    store.upsert_rate_class("smtp", 5, 60_000, 5)
    c = headgate.Client(store)
    ids = [c.enqueue("send_email", str(i).encode(), queue="mail", rate_class="smtp")
           for i in range(8)]
    assert len(store.admit("w1", ["mail"], capacity=100)) == 5  # the bucket is empty now
    body = text_of(client.get(f"/jobs?job={ids[-1]}"))
    assert re.search(r"Waiting for rate class smtp: 0 of 5 tokens, refills in [\d.]+ ?[a-z]+",
                     body), body
    store.upsert_rate_class("smtp", 5, 60_000, 5, paused=True)
    body = text_of(client.get(f"/jobs?job={ids[-1]}"))
    assert "Waiting for rate class smtp: it is paused" in body
    store.set_queue_paused("mail", True)
    assert "Queue mail is paused" in text_of(client.get(f"/jobs?job={ids[-1]}"))


def test_payload_fragment_renders_json_text_and_hex(store: Any, client: Any) -> None:
    c = headgate.Client(store)
    as_json = c.enqueue("k", b'{"a": [1, 2]}')
    as_text = c.enqueue("k", "héllo wörld".encode())
    as_hex = c.enqueue("k", b"\x00\xff\x10")
    assert "shown as json" in text_of(client.get(f"/jobs/{as_json}/payload"))
    assert "héllo wörld" in text_of(client.get(f"/jobs/{as_text}/payload"))
    assert "00 ff 10" in text_of(client.get(f"/jobs/{as_hex}/payload"))


def test_operation_fragment_asks_before_it_acts(store: Any, client: Any,
                                                seeded: Seeded) -> None:
    op = store.create_operation("retry", {"state": "archived"}, dry_run=True)
    body = text_of(client.get(f"/ops/{op.id}"))
    assert "Retry 6 jobs" in body and "state = archived" in body
    assert 'hx-post="/api/v1/jobs/bulk"' in body and '"dry_run": false' in body


# -- escaping --------------------------------------------------------------------------------

def test_hostile_strings_render_as_text_everywhere(store: Any, db: str) -> None:
    c = headgate.Client(store)
    job_id = c.enqueue(XSS, XSS.encode(), queue=XSS, partition_key=XSS, tags=[XSS],
                       rate_class=XSS, headers={XSS: XSS})
    claim = store.admit(XSS, [XSS], capacity=1)[0]
    store.ack(claim, Outcome.RETRY, error=XSS, logs=[XSS])
    store.heartbeat(WorkerBeat(XSS, host=XSS, queues=(XSS,), concurrency=1))
    store.upsert_concurrency_limit(XSS, XSS, 1)
    store.upsert_rate_class(XSS, 1, 1000)
    store.enqueue_many([])
    client = make_client(store, db)
    urls = ["/", "/jobs", f"/jobs?job={job_id}", f"/jobs/{job_id}/payload", "/workers",
            "/cluster", "/concurrency", "/rate-classes", f"/partitions?queue={XSS}",
            f"/jobs?q=kind:{XSS}"]
    for url in urls:
        resp = client.get(url)
        body = text_of(resp)
        assert resp.status_code == 200, url
        assert XSS not in body, url
        assert "<script>" not in body.lower(), url
        assert ESCAPED in body or "%3Cscript%3E" in body, url
    # The queue page of a hostile name, and a hostile 404.
    assert XSS not in text_of(client.get("/queues/" + XSS))
    missing = client.get("/jobs/" + XSS)
    assert missing.status_code == 404 and XSS not in text_of(missing)


# -- 404s, read-only, sign-in -------------------------------------------------------------

@pytest.mark.parametrize("url,words", [
    ("/jobs/no-such-job", "There is no job with id"),
    ("/queues/no-such-queue", "There is no queue named"),
    ("/periodic/no-such-schedule", "There is no periodic schedule"),
    ("/partitions?queue=no-such-queue", "There is no queue named"),
    ("/ops/no-such-op", "There is no bulk operation"),
    ("/jobs?job=no-such-job", "Job not found"),
])
def test_unknown_things_get_a_friendly_404(client: Any, seeded: Seeded, url: str,
                                           words: str) -> None:
    resp = client.get(url)
    assert resp.status_code == 404
    assert words in text_of(resp)
    assert "Traceback" not in text_of(resp)


def test_read_only_disables_every_mutation_control(store: Any, db: str,
                                                   seeded: Seeded) -> None:
    client = make_client(store, db, read_only=True)
    for url in ["/", "/queues/emails", "/rate-classes", "/concurrency", "/quarantine",
                "/periodic", f"/jobs?state=archived&job={seeded.archived[0]}"]:
        body = text_of(client.get(url))
        assert "Read-only mode" in body, url
        for tag in re.findall(r"<button[^>]*data-mutation[^>]*>", body):
            assert " disabled" in tag and "HG_READ_ONLY" in tag, (url, tag)
        for tag in re.findall(r"<button type=\"submit\"[^>]*>", body):
            if "Sign out" in tag or 'class="btn primary"' not in tag:
                continue
            assert " disabled" in tag, (url, tag)
    # The enforcement is the API's: it refuses the mutation the button would make.
    resp = client.post("/api/v1/queues/emails/pause", headers={"Idempotency-Key": "k1"})
    assert resp.status_code == 403


def test_sign_in_with_a_token_then_the_console_session_acts_on_the_api(
    store: Any, db: str
) -> None:
    client = make_client(store, db, api_tokens=("sekrit-token",))
    resp = client.get("/jobs?state=archived")
    assert resp.status_code == 302 and "/signin?next=" in resp.headers["Location"]
    page = text_of(client.get("/signin"))
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    # Without the CSRF value the form is refused; a wrong token too.
    assert client.post("/signin", data={"token": "sekrit-token"}).status_code == 400
    assert client.post("/signin", data={"token": "nope", "csrf": csrf}).status_code == 401
    resp = client.post("/signin", data={"token": "sekrit-token", "csrf": csrf,
                                        "next": "https://evil.example/"})
    assert resp.status_code == 302 and resp.headers["Location"] == "/"  # no open redirect
    body = text_of(client.get("/"))
    assert "Sign out" in body and "sekrit-token" not in body
    csrf = re.search(r'name="hg-csrf" content="([^"]+)"', body).group(1)  # type: ignore
    headgate.Client(store).enqueue("k", b"", queue="q1")
    # The API itself still needs a bearer token; the console's hook supplies the
    # session's, but only together with the session's CSRF header.
    plain = client.post("/api/v1/queues/q1/pause", headers={"Idempotency-Key": "a"})
    assert plain.status_code == 401
    forged = client.post("/api/v1/queues/q1/pause",
                         headers={"Idempotency-Key": "b", "X-Headgate-CSRF": "guess"})
    assert forged.status_code == 401
    ok = client.post("/api/v1/queues/q1/pause",
                     headers={"Idempotency-Key": "c", "X-Headgate-CSRF": csrf})
    assert ok.status_code == 204
    assert next(q for q in store.queue_stats() if q.queue == "q1").paused


def test_the_sign_in_page_opens_no_live_socket(store: Any, db: str) -> None:
    """/live refuses a signed-out page, so a socket there would only ever show
    "reconnecting…" and the disconnected banner."""
    client = make_client(store, db, api_tokens=("sekrit-token",))
    page = text_of(client.get("/signin"))
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    refused = text_of(client.post("/signin", data={"token": "nope", "csrf": csrf}))
    for body in (page, refused):
        assert "ws-connect=" not in body
        assert 'id="live-banner"' not in body and 'id="live-pill"' not in body
    client.post("/signin", data={"token": "sekrit-token", "csrf": csrf})
    body = text_of(client.get("/"))
    assert 'ws-connect="/live?page=overview"' in body and 'id="live-banner"' in body


# -- words -------------------------------------------------------------------------------------

def test_durations_read_like_a_person_says_them() -> None:
    assert present.duration(800) == "800 ms"
    assert present.duration(4200) == "4.2 s"
    assert present.duration(200_000) == "3m 20s"
    assert present.duration(3_840_000) == "1h 4m"
    assert present.duration(None) == "—"


def test_one_sentence_per_blocked_by_value() -> None:
    job = headgate.Job(
        id="j", kind="k", queue="q", state=State.AVAILABLE, schema_version=1, priority=0,
        partition_key="acme", rate_class="smtp", weight=1, fingerprint="f" * 32,
        scheduled_at_ms=0, max_attempts=25, retention_ms=1, tags=(), sticky_worker="",
        headers={}, attempt=0, crash_attempt=0, fence=0, lease_id=None,
        lease_expires_at_ms=None, worker_id=None, enqueued_at_ms=1, attempted_at_ms=None,
        finalized_at_ms=None, errors=[], periodic_schedule_id="", periodic_tick_ms=None,
        cancel_requested=False)
    cases = {
        "rate_class": ({"rate_class": "smtp", "tokens_available": 0.0, "burst": 5,
                        "refill_in_ms": 800, "weight": 1, "limit": 5, "window_ms": 1000},
                       "Waiting for rate class smtp: 0 of 5 tokens, refills in 800 ms"),
        "concurrency_limit": ({"limit": "pdf", "running": 4, "max_concurrent": 4,
                               "partition_key": "acme", "queue": "q",
                               "on_saturated": "queue"},
                              "Waiting for concurrency limit pdf: 4 of 4 running in "
                              "partition acme"),
        "fairness": ({"position_in_partition": 12, "partition_key": "acme",
                      "partition_running": 3, "partition_waiting": 20},
                     "Waiting its turn in partition acme: 12 jobs ahead"),
        "quarantine": ({"fingerprint": "abc", "crash_count": 3},
                       "Held by quarantine: its fingerprint abc lost 3"),
        "schedule": ({"state": "scheduled", "due_in_ms": 4200, "scheduled_at_ms": 5},
                     "Scheduled: becomes available in 4.2 s"),
        "queue_paused": ({"queue": "q"}, "Queue q is paused"),
    }
    for blocked, (detail, words) in cases.items():
        sentences = present.explain_sentences(Explanation(False, blocked, detail), job)
        assert len(sentences) == 1 and sentences[0].startswith(words), (blocked, sentences)
    admissible = present.explain_sentences(Explanation(True, None, {"queue": "q"}, 0), job)
    assert admissible[0].startswith("Admissible now")


def test_actions_follow_the_transition_table() -> None:
    assert present.job_actions("archived") == ["retry", "delete"]
    assert present.job_actions("cancelled") == ["retry", "delete"]
    assert present.job_actions("pending") == ["promote", "cancel", "delete"]
    assert present.job_actions("running") == ["cancel"]
    assert present.job_actions("quarantined") == ["release", "delete"]
    assert present.job_actions("completed") == ["delete"]


def test_timeline_runs_created_waiting_running_terminal(store: Any) -> None:
    c = headgate.Client(store)
    job_id = c.enqueue("k", b"", queue="t", max_attempts=1)
    claim = store.admit("w", ["t"], capacity=1)[0]
    store.ack(claim, Outcome.RETRY, error="boom")
    steps = present.timeline(store.get_job(job_id))
    assert [s.label for s in steps] == ["created", "waiting", "running", "archived"]
    assert steps[-1].took == "" and steps[1].took.endswith("ms")


def test_bulk_selector_refuses_filters_the_api_cannot_select_by() -> None:
    q = JobQuery.from_args({"q": "tag:vip", "state": "archived"})
    selector, why = q.bulk_selector()
    assert selector is None and "tags" in why
    q = JobQuery.from_args({"q": "kind:send_email partition:acme", "state": "archived"})
    assert q.bulk_selector()[0] == {"state": "archived", "kind": "send_email",
                                    "partition_key": "acme"}


@pytest.mark.parametrize("args", [
    {},
    {"q": "kind:send_ tag:a&b=1 tag_any:ü+x", "state": "archived"},
    {"queue": "q/1 #?%", "cursor": "Zm9v-_", "job": "01j"},
])
def test_job_links_are_the_urls_url_for_builds(client: Any, args: dict[str, str]) -> None:
    """The Jobs page builds its links without url_for (one route lookup per row was a
    fifth of the page); they must stay byte for byte what url_for builds."""
    for root in ("", "/console"):
        with client.application.test_request_context("/jobs", query_string=args,
                                                     environ_base={"SCRIPT_NAME": root}):
            query = JobQuery.from_args(flask.request.args)
            links = query.links(flask.url_for("dashboard.jobs"))
            for override in ({}, {"job": ""}, {"state": "", "cursor": "", "job": ""},
                             {"state": "running", "cursor": "", "job": ""},
                             {"cursor": "YWJj", "job": ""}):
                assert links(**override) == flask.url_for(
                    "dashboard.jobs", **query.params(**override)), override
            for job_id in ("01abc", "a b/c?d&e=f+ü#"):
                assert links.sheet(job_id) == flask.url_for(
                    "dashboard.jobs", **query.params(job=job_id)), job_id


# -- live updates -------------------------------------------------------------------------------

def test_live_fragments_render_out_of_band_for_every_topic(client: Any, store: Any,
                                                           seeded: Seeded) -> None:
    store.heartbeat(WorkerBeat("w-1", queues=("emails",), concurrency=4))
    topics = {"totals", "counts:", "counts:emails", "queues", "queue:emails", "workers",
              "cluster", "rate_classes", "quarantine", "periodic", "partitions:emails",
              f"job:{seeded.archived[0]}", f"sheet:{seeded.running[0]}", "job:gone-id"}
    frame = live.load_topics(store, topics)
    with client.application.test_request_context("/live"):
        for topic in sorted(topics):
            html = live.render_topic(topic, frame[topic])
            assert 'hx-swap-oob="true"' in html, topic
            assert re.match(r'\s*<(tr|tbody|section|nav|div)\s+id="', html), topic
    with client.application.test_request_context("/live"):
        assert "deleted" in live.render_topic("job:gone-id", None)


def test_a_job_row_sent_live_keeps_its_expected_start(client: Any, store: Any) -> None:
    """A row re-rendered by a live frame (any commit, also another process's) is the row
    the list drew, expected start included."""
    store.upsert_rate_class("smtp", 5, 1000, 5)
    store.heartbeat(WorkerBeat("w-1", queues=("mail",), concurrency=4))
    job_id = headgate.Client(store).enqueue("send_email", b"x", queue="mail", rate_class="smtp")
    topic = f"job:{job_id}"
    with client.application.test_request_context("/live"):
        html = live.render_topic(topic, live.load_topics(store, {topic})[topic])
    assert 'class="expected' in html and "starts " in html, html


def test_cluster_links_only_queues_that_have_a_page(store: Any, client: Any) -> None:
    headgate.Client(store).enqueue("k", b"", queue="real q")
    store.heartbeat(WorkerBeat("w", queues=("real q", "config only"), concurrency=1))
    body = text_of(client.get("/cluster"))
    links = [html.unescape(h) for h in re.findall(r'href="(/queues/[^"]*)"', body)]
    assert links == ["/queues/real%20q"]
    assert client.get(links[0]).status_code == 200
    assert re.search(r'<th scope="row">config only <span', body)


@pytest.mark.parametrize("url,topic", [("/", "queues"), ("/rate-classes", "rate_classes")])
def test_an_empty_page_subscribes_to_the_rows_it_will_show(store: Any, db: str, url: str,
                                                           topic: str) -> None:
    """The first queue or rate class appears on a page opened while there were none."""
    from simple_websocket import Client as WsClient

    app = create_app(store, config=Settings(sqlite_path=db), background=False)
    body = text_of(app.test_client().get(url))
    topics = sorted(set(re.findall(r'data-topic="([^"]*)"', body)))
    assert topic in topics
    with serving(app) as port:
        ws = WsClient.connect(f"ws://127.0.0.1:{port}/live?page=x")
        ws.send(json.dumps({"topics": topics, "query": ""}))
        time.sleep(0.3)
        store.upsert_rate_class("first class", 5, 1000)
        headgate.Client(store).enqueue("k", b"", queue="first queue", rate_class="first class")
        name = "first queue" if topic == "queues" else "first class"
        deadline = time.monotonic() + 5
        got = ""
        while time.monotonic() < deadline and name not in got:
            got = ws.receive(timeout=1) or ""
        ws.close()
    assert f'data-topic="{topic}" hx-swap-oob="true"' in got and name in got


def test_live_messages_keep_table_rows_parseable() -> None:
    msgs = live.group_messages(["<nav id=a></nav>", "<tr id=b></tr>", "<tr id=c></tr>"])
    assert msgs == ["<nav id=a></nav>", "<tr id=b></tr>\n<tr id=c></tr>"]


def test_hub_coalesces_bursts_and_reads_once_per_frame(store: Any) -> None:
    hub = live.LiveHub(store)
    subs = [live.Subscriber() for _ in range(5)]
    for sub in subs:
        sub.topics = {"totals", "queues"}
        hub.attach(sub)
    reads = {"n": 0}
    original = store.counts

    def counting(queue: str | None = None) -> dict[str, int]:
        reads["n"] += 1
        return original(queue)

    store.counts = counting  # type: ignore[method-assign]
    try:
        c = headgate.Client(store)
        start = time.monotonic()
        for i in range(200):  # a burst of commits, each publishing activity
            c.enqueue("burst", str(i).encode(), queue="burst")
        elapsed = time.monotonic() - start
        time.sleep(live.FRAME_INTERVAL_S * 3)
        frames = hub.frames
        # ≤ 4 frames a second (+1 for the frame in flight when the burst began).
        assert 1 <= frames <= int((elapsed + 1) / live.FRAME_INTERVAL_S) + 1
        # One counters read per frame for all five sockets, not one per socket.
        assert reads["n"] <= frames
        for sub in subs:
            assert sub.take()["totals"]["available"] == 200
    finally:
        store.counts = original  # type: ignore[method-assign]
        for sub in subs:
            hub.detach(sub)
        hub.stop(5)


def test_hub_pushes_a_commit_made_by_another_process(store: Any, db: str) -> None:
    """Another store on the same file stands for another process: its commits never
    reach this store's activity signal, only its change token (SQLite's data_version) —
    and `totals` is read on activity only, never on the clock."""
    other = headgate.open_store(f"sqlite:///{db}", migrate=False)
    hub = live.LiveHub(store)
    sub = live.Subscriber()
    sub.topics = {"totals"}
    hub.attach(sub)
    try:
        time.sleep(live.TICK_INTERVAL_S + 0.5)  # one tick has read the token
        sub.take()
        headgate.Client(other).enqueue("elsewhere", b"", queue="elsewhere")
        wait_for(lambda: sub.take().get("totals", {}).get("available") == 1,
                 3 * live.TICK_INTERVAL_S, "the other process's job in the totals")
    finally:
        hub.detach(sub)
        hub.stop(5)
        other.close()


def test_websocket_pushes_a_count_change_after_an_enqueue(store: Any, db: str) -> None:
    from simple_websocket import Client as WsClient

    app = create_app(store, config=Settings(sqlite_path=db), background=False)
    with serving(app) as port:
        ws = WsClient.connect(f"ws://127.0.0.1:{port}/live?page=overview")
        ws.send(json.dumps({"topics": ["totals"], "query": ""}))
        time.sleep(0.3)
        headgate.Client(store).enqueue("fresh", b"", queue="live-q")
        deadline = time.monotonic() + 5
        got = ""
        while time.monotonic() < deadline and 'id="totals"' not in got:
            got = ws.receive(timeout=1) or ""
        assert 'id="totals"' in got and 'hx-swap-oob="true"' in got
        assert re.search(r'<span class="big">1</span><span class="label">waiting', got)
        ws.close()


def test_stopping_closes_live_sockets_going_away_and_refuses_new_ones(
    store: Any, db: str,
) -> None:
    from simple_websocket import Client as WsClient
    from simple_websocket import ConnectionClosed

    app = create_app(store, config=Settings(sqlite_path=db), background=False)
    with serving(app) as port:
        url = f"ws://127.0.0.1:{port}/live?page=overview"
        ws = WsClient.connect(url)
        ws.send(json.dumps({"topics": ["totals"], "query": ""}))
        time.sleep(0.3)
        headgate.Client(store).enqueue("fresh", b"", queue="live-q")
        assert 'id="totals"' in (ws.receive(timeout=5) or "")  # the socket is served
        begin_stopping(app)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.receive(timeout=5)
        assert (closed.value.reason, closed.value.message) == (1001, "server stopping")
        late = WsClient.connect(url)
        with pytest.raises(ConnectionClosed) as refused:
            while True:
                late.receive(timeout=5)
        assert refused.value.reason == 1001


def test_shutting_the_console_down_ends_its_live_threads(store: Any, db: str) -> None:
    """`dashboard.shutdown` returns once the live hub's thread and every socket's reader
    have ended, pages still open. Closing the sockets alone left each reader waiting for
    its peer, and the hub's thread for its next tick: threads running on in a process
    that goes on after the app (an embedding app, a test run)."""
    from simple_websocket import Client as WsClient
    from simple_websocket import ConnectionClosed

    before = set(threading.enumerate())

    def live_threads() -> list[str]:
        return sorted(t.name for t in set(threading.enumerate()) - before
                      if t.name.startswith("headgate-live") and t.is_alive())

    app = create_app(store, config=Settings(sqlite_path=db), background=False)
    pages: list[Any] = []
    with serving(app) as port:
        try:
            for _ in range(2):
                pages.append(WsClient.connect(f"ws://127.0.0.1:{port}/live?page=overview"))
                pages[-1].send(json.dumps({"topics": ["totals"], "query": ""}))
            time.sleep(0.3)
            headgate.Client(store).enqueue("fresh", b"", queue="live-q")
            for ws in pages:
                assert 'id="totals"' in (ws.receive(timeout=5) or "")  # the pages are served
            assert live_threads() == ["headgate-live", "headgate-live-reader",
                                      "headgate-live-reader"]
            started = time.monotonic()
            assert headgate.dashboard.shutdown(app, timeout=5)
            assert live_threads() == []
            assert time.monotonic() - started < 3.0  # not the 5 s allowed
            for ws in pages:
                with pytest.raises(ConnectionClosed) as closed:
                    while True:
                        ws.receive(timeout=5)
                assert closed.value.reason == 1001
        finally:
            for ws in pages:  # a client's thread is not a daemon: it would hold pytest up
                with contextlib.suppress(ConnectionClosed):
                    ws.close()


def test_idempotency_key_makes_a_double_click_act_once(store: Any, client: Any) -> None:
    c = headgate.Client(store)
    job_id = c.enqueue("k", b"", queue="dq", max_attempts=1)
    claim = store.admit("w", ["dq"], capacity=1)[0]
    store.ack(claim, Outcome.RETRY, error="x")
    headers = {"Idempotency-Key": "same-click", "Content-Type": "application/json",
               "X-Headgate-CSRF": "n/a"}
    first = client.post(f"/api/v1/jobs/{job_id}/retry", data="{}", headers=headers)
    second = client.post(f"/api/v1/jobs/{job_id}/retry", data="{}", headers=headers)
    assert first.status_code == second.status_code == 204  # replayed, not "cannot retry"
    assert store.get_job(job_id).state is State.AVAILABLE


def test_schedule_pause_buttons_name_the_schedule_not_its_fields(client: Any,
                                                                 seeded: Seeded) -> None:
    body = text_of(client.get("/periodic"))
    m = re.search(r"<button[^>]*hx-put=\"/api/v1/periodic/nightly-report\"[^>]*>", body)
    assert m, body
    assert 'data-schedule-toggle="nightly-report"' in m.group(0)
    assert 'data-paused="true"' in m.group(0) and "data-body" not in m.group(0)


def test_the_console_mounts_under_a_prefix(store: Any, db: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HG_UI_PREFIX", "/console/")
    client = make_client(store, db)
    headgate.Client(store).enqueue("k", b"", queue="pq")
    body = text_of(client.get("/console/"))
    assert 'href="/console/jobs"' in body and 'ws-connect="/console/live?page=overview"' in body
    assert 'hx-post="/api/v1/queues/pq/pause"' in body  # the API stays at /api/v1
    assert client.get("/console/jobs").status_code == 200
    assert client.get("/jobs").status_code == 404


def test_a_read_only_token_makes_the_session_read_only(store: Any, db: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    client = make_client(store, db, api_tokens=("rw-token",), api_read_tokens=("ro-token",))
    headgate.Client(store).enqueue("k", b"", queue="q2")
    page = text_of(client.get("/signin"))
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    assert client.post("/signin", data={"token": "ro-token", "csrf": csrf}).status_code == 302
    body = text_of(client.get("/"))
    assert "read-only API token" in body
    pause = re.search(r"<button[^>]*hx-post=\"/api/v1/queues/q2/pause\"[^>]*>", body)
    assert pause and " disabled" in pause.group(0)
