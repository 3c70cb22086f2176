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
