"""The console says what is true: a stall in the headline at once, retry of undecodable
jobs, attempts labelled by what they were, rejections counted as jobs, the blocker's
partition and its fix on the sheet. Flask's test client on a real SQLite store; the
browser half is e2e/test_console_truth.py."""

from __future__ import annotations

from typing import Any

import headgate
from headgate.core import Outcome
from headgate.core.records import WorkerBeat
from headgate.dashboard import present


def text_of(resp: Any) -> str:
    return str(resp.get_data(as_text=True))


# -- undecodable jobs can be retried ------------------------------------------------------

def test_an_undecodable_job_offers_retry_on_its_sheet(store: Any, client: Any) -> None:
    job_id = headgate.Client(store).enqueue("not.deployed", b"{}", queue="u")
    (claim,) = store.admit("w", ["u"], capacity=1)
    store.ack(claim, Outcome.UNDECODABLE, error="no handler for not.deployed")
    assert present.job_actions("undecodable") == ["retry", "delete"]
    body = text_of(client.get(f"/jobs?job={job_id}"))
    assert f'hx-post="/api/v1/jobs/{job_id}/retry"' in body
    assert "Deploy the handler, then retry it" in body


# -- attempts are labelled by what they led to ----------------------------------------------

def attempt_items(body: str) -> list[str]:
    """The sheet's attempt list, newest first, as `header | label` lines."""
    import re

    section = body.split("Attempts with errors", 1)[1].split("</ol>", 1)[0]
    return [f"{h} | {label}" for h, label in re.findall(
        r'<strong>([^<]+)</strong>\s*<span class="attempt-label">([^<]+)</span>', section)]


def test_the_last_attempt_is_archived_not_a_retry(store: Any, client: Any) -> None:
    c = headgate.Client(store)
    once = c.enqueue("charge", b"{}", queue="a", max_attempts=1)
    (claim,) = store.admit("w", ["a"], capacity=1)
    store.ack(claim, Outcome.RETRY, error="ValueError: declined")
    assert attempt_items(text_of(client.get(f"/jobs?job={once}"))) == [
        "attempt 1 of 1 | failed → archived: no attempts left"]

    twice = c.enqueue("charge", b"{}", queue="b", max_attempts=2)
    (claim,) = store.admit("w", ["b"], capacity=1)
    store.ack(claim, Outcome.RETRY, error="ValueError: declined", delay_ms=0)
    body = text_of(client.get(f"/jobs?job={twice}"))
    assert attempt_items(body) == ["attempt 1 of 2 | failed → retries after a backoff"]
    store.promote_due()
    (claim,) = store.admit("w", ["b"], capacity=1)
    store.ack(claim, Outcome.RETRY, error="ValueError: declined again")
    assert attempt_items(text_of(client.get(f"/jobs?job={twice}"))) == [
        "attempt 2 of 2 | failed → archived: no attempts left",
        "attempt 1 of 2 | failed → retried"]
    # An operator retry gives one more attempt; the archived one stays archived.
    store.operator_retry(once)
    (claim,) = store.admit("w", ["a"], capacity=1)
    store.ack(claim, Outcome.SKIP, error="not today")
    assert attempt_items(text_of(client.get(f"/jobs?job={once}"))) == [
        "attempt 1 of 2 | skipped → archived",
        "attempt 1 of 2 | failed → retried"]


# -- the blocker: its partition, its words, its fix ------------------------------------------

def test_the_sheet_offers_the_fix_the_overview_offers(store: Any, client: Any) -> None:
    store.upsert_rate_class("smtp", 5, 60_000, 5, paused=True)
    job_id = headgate.Client(store).enqueue("send", b"{}", queue="mail", rate_class="smtp")
    sheet = text_of(client.get(f"/jobs?job={job_id}"))
    assert "Why is it not running?" in sheet and "Admission" not in sheet
    fix = sheet.split('class="fix" data-blocker="rate_class_paused"', 1)[1].split("</p>", 1)[0]
    assert 'hx-put="/api/v1/rate-classes/smtp"' in fix and ">Resume smtp</button>" in fix
    assert '"paused": false' in fix and '"limit": 5' in fix
    store.upsert_rate_class("smtp", 5, 60_000, 5, paused=False)
    store.set_queue_paused("mail", True)
    sheet = text_of(client.get(f"/jobs?job={job_id}"))
    assert 'data-blocker="queue_paused"' in sheet
    assert 'hx-post="/api/v1/queues/mail/resume"' in sheet


def test_a_pending_job_is_asked_the_same_question(store: Any, client: Any) -> None:
    job_id = headgate.Client(store).enqueue("held", b"{}", queue="p", pending=True)
    sheet = text_of(client.get(f"/jobs?job={job_id}"))
    assert "Why is it not running?" in sheet and "<h3>Admission</h3>" not in sheet
    assert "waits for an operator to promote it" in sheet


def test_the_concurrency_blocker_names_the_partition_at_its_limit(store: Any,
                                                                  client: Any) -> None:
    store.upsert_concurrency_limit("per-tenant", queue="reports", max_concurrent=1)
    c = headgate.Client(store)
    c.enqueue("render", b"1", queue="reports", partition_key="acme")
    waiting = c.enqueue("render", b"2", queue="reports", partition_key="acme")
    assert len(store.admit("w", ["reports"], capacity=5)) == 1
    store.heartbeat(WorkerBeat("w", queues=("reports",), concurrency=5))
    overview = row_of(text_of(client.get("/")), "reports")
    # Nothing finished yet while one runs and one waits: the stall names the partition.
    assert "stalled: concurrency limit per-tenant full in partition acme" in overview
    assert "reached in partition acme: 1 of 1 running" in overview
    sheet = text_of(client.get(f"/jobs?job={waiting}"))
    assert "1 of 1 running in partition acme of queue reports" in sheet
    assert 'href="/partitions?queue=reports"' in sheet
    exp = store.explain_admission(waiting)
    assert present.blocker(exp, True)["partition"] == "acme"  # type: ignore[index]


# -- the headline sees a stall at once ------------------------------------------------------

def row_of(body: str, queue: str) -> str:
    """The overview row of `queue` (its id is present.dom_id's)."""
    start = body.index(f'id="{present.dom_id("queue", queue)}"')
    return body[start:body.index("</tr>", start)]


def keep_up(store: Any, n: int, **fields: Any) -> None:
    """`n` jobs of queue emails arrive and finish: the smoothed trend reads steady."""
    c = headgate.Client(store)
    for i in range(n):
        c.enqueue("send", b"%d" % i, queue="emails", **fields)
        for claim in store.admit("w", ["emails"], capacity=1):
            store.ack(claim, Outcome.SUCCESS)


def test_a_paused_rate_class_is_a_stall_in_the_headline_at_once(store: Any,
                                                                 client: Any) -> None:
    store.upsert_rate_class("smtp", 1000, 1000, 1000)
    store.heartbeat(WorkerBeat("w", queues=("emails",), concurrency=5))
    keep_up(store, 30, rate_class="smtp")
    c = headgate.Client(store)
    c.enqueue("send", b"x", queue="emails", rate_class="smtp")
    row = row_of(text_of(client.get("/")), "emails")
    assert "keeping up" in row and "stalled" not in row  # the trend before the pause
    store.upsert_rate_class("smtp", 1000, 1000, 1000, paused=True)
    for i in range(3):
        c.enqueue("send", b"w%d" % i, queue="emails", rate_class="smtp")
    row = row_of(text_of(client.get("/")), "emails")
    assert "stalled: rate class smtp paused" in row and "keeping up" not in row
    assert "4 waiting, none running" in row and "tone-bad" in row
    assert 'hx-put="/api/v1/rate-classes/smtp"' in row and "Resume smtp" in row
    page = text_of(client.get("/queues/emails"))
    assert "stalled: rate class smtp paused" in page
    # Lifted: admitted again, and the headline no longer says stalled.
    store.upsert_rate_class("smtp", 1000, 1000, 1000, paused=False)
    assert "stalled" not in row_of(text_of(client.get("/")), "emails")


def test_a_queue_without_a_live_worker_stalls_and_says_so(store: Any, client: Any) -> None:
    keep_up(store, 5)
    headgate.Client(store).enqueue("send", b"late", queue="emails")
    row = row_of(text_of(client.get("/")), "emails")
    assert "stalled: no live worker for the queue" in row
    assert 'href="/workers"' in row


def test_a_throttled_queue_that_drains_is_not_called_stalled(store: Any, client: Any) -> None:
    """A rate class out of tokens while jobs finish is throttling, not a stall."""
    store.upsert_rate_class("api", 1, 60_000, 1)
    c = headgate.Client(store)
    c.enqueue("call", b"1", queue="hooks", rate_class="api")
    (claim,) = store.admit("w", ["hooks"], capacity=5)
    store.ack(claim, Outcome.SUCCESS)
    c.enqueue("call", b"2", queue="hooks", rate_class="api")
    store.heartbeat(WorkerBeat("w", queues=("hooks",), concurrency=1), [])
    row = row_of(text_of(client.get("/")), "hooks")
    assert "stalled" not in row


def test_stall_suspected_reads_the_counters_not_the_trend() -> None:
    from headgate.core import drain

    now = 10 * drain.BUCKET_MS + 5_000
    busy = {now - now % drain.BUCKET_MS: (3, 3, 0)}
    assert not drain.stall_suspected({"available": 0}, {}, now)
    assert drain.stall_suspected({"available": 4, "running": 0}, busy, now)
    assert not drain.stall_suspected({"available": 4, "running": 2}, busy, now)
    assert drain.stall_suspected({"available": 4, "running": 2}, {}, now)
    old = {now - now % drain.BUCKET_MS - 2 * drain.BUCKET_MS: (3, 3, 0)}
    assert not drain.recently_drained(old, now) and drain.recently_drained(busy, now)


# -- new jobs are offered over the live socket ----------------------------------------------

def test_the_job_list_offers_new_jobs_over_the_live_socket(store: Any, client: Any) -> None:
    import html as html_mod
    import re

    from headgate.dashboard import live
    from headgate.dashboard.query import JobQuery

    c = headgate.Client(store)
    first = [c.enqueue("send", b"%d" % i, queue="q") for i in range(2)]
    body = text_of(client.get("/jobs?queue=q"))
    topic = html_mod.unescape(re.search(r'id="new-jobs"[^>]*data-topic="([^"]+)"', body)
                              .group(1))  # type: ignore[union-attr]
    assert topic == f"newjobs:{max(first)}|queue=q"
    assert re.search(r'<p id="new-jobs"[^>]* hidden', body)
    assert live.load_topics(store, {topic})[topic] == 0
    for i in range(3):
        c.enqueue("send", b"new%d" % i, queue="q")
    c.enqueue("send", b"elsewhere", queue="other")
    frame = live.load_topics(store, {topic})
    assert frame[topic] == 3
    query = JobQuery.from_args({"queue": "q"})
    with client.application.test_request_context("/live"):
        fragment = live.render_topic(topic, frame[topic], query)
    assert 'hx-swap-oob="true"' in fragment and " hidden" not in fragment
    assert '3 new jobs — show</a>' in fragment and 'href="/jobs?queue=q"' in fragment
    # A payload search is not re-run per frame.
    searched = f"newjobs:{max(first)}|q=payload%3Anew"
    assert live.load_topics(store, {searched})[searched] == 0


def test_a_finished_bulk_operation_asks_the_page_to_reload_the_list(store: Any,
                                                                    client: Any) -> None:
    c = headgate.Client(store)
    for i in range(3):
        c.enqueue("send", b"%d" % i, queue="bulk")
    op = store.create_operation("cancel", {"queue": "bulk"})
    running = text_of(client.get(f"/ops/{op.id}"))
    assert "data-op-finished" not in running
    while store.run_operations_batch(limit=100):
        pass
    done = text_of(client.get(f"/ops/{op.id}"))
    assert f'data-op-finished="{op.id}"' in done
    assert "Cancel done: 3 jobs; the list is reloaded." in done


# -- the rejection strip counts jobs ----------------------------------------------------------

def test_the_rejection_strip_counts_jobs_held_back_not_polls(store: Any, client: Any) -> None:
    store.upsert_rate_class("smtp", 1, 1000, 1, paused=True)
    c = headgate.Client(store)
    for i in range(4):
        c.enqueue("send", b"%d" % i, queue="emails", rate_class="smtp")
    for _ in range(25):  # a worker polling
        assert store.admit("w", ["emails"], capacity=8) == []
    body = text_of(client.get("/"))
    legend = body.split('class="legend"', 1)[1].split("</figcaption>", 1)[0]
    assert "jobs held back, peak minute:" in legend
    assert "rate class 4</span>" in legend
    assert "jobs held back by admission" in body
