"""The console says what is true: a stall in the headline at once, retry of undecodable
jobs, attempts labelled by what they were, rejections counted as jobs, the blocker's
partition and its fix on the sheet. Flask's test client on a real SQLite store; the
browser half is e2e/test_console_truth.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

import headgate
from headgate.config import Settings
from headgate.core import Outcome
from headgate.dashboard import present
from headgate.web import create_app


@pytest.fixture
def db(tmp_path: Any) -> str:
    return str(tmp_path / "truth.db")


@pytest.fixture
def store(db: str) -> Iterator[Any]:
    s = headgate.open_store(f"sqlite:///{db}")
    yield s
    s.close()


@pytest.fixture
def client(store: Any, db: str) -> Any:
    app = create_app(store, config=replace(Settings(sqlite_path=db)), background=False)
    app.config["TESTING"] = True
    return app.test_client()


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
    overview = text_of(client.get("/"))
    assert "concurrency limit per-tenant reached in partition acme: 1 of 1 running" in overview
    sheet = text_of(client.get(f"/jobs?job={waiting}"))
    assert "1 of 1 running in partition acme of queue reports" in sheet
    assert 'href="/partitions?queue=reports"' in sheet
    exp = store.explain_admission(waiting)
    assert present.blocker(exp, True)["partition"] == "acme"  # type: ignore[index]
