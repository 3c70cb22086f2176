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
