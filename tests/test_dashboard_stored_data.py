"""Whatever a producer stored — payloads, results, output, schedules — the console shows
without failing and without altering it: a page never 500s on stored bytes, an edit
form saved unchanged writes back exactly what was stored, and payloads stay out of
pages until someone asks for one (SPEC §11, §13)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from markupsafe import escape

import headgate
from headgate.config import Settings
from headgate.core import Outcome
from headgate.web import create_app

DEEP = b"[" * 5000 + b"]" * 5000
SURROGATE = b'{"name": "\\ud800"}'


@pytest.fixture
def db(tmp_path: Any) -> str:
    return str(tmp_path / "stored.db")


@pytest.fixture
def store(db: str) -> Iterator[Any]:
    s = headgate.open_store(f"sqlite:///{db}")
    yield s
    s.close()


@pytest.fixture
def app(store: Any, db: str) -> Any:
    app = create_app(store, config=replace(Settings(sqlite_path=db)), background=False)
    app.config["TESTING"] = True
    return app


@pytest.fixture
def client(app: Any) -> Any:
    return app.test_client()


def text_of(resp: Any) -> str:
    return resp.get_data(as_text=True)


def shown(data: bytes) -> str:
    """How the start of `data` reads inside a `<pre>` of the page, escaped by Jinja."""
    return '<pre class="blob">' + str(escape(data.decode()[:40]))


def finished_with(store: Any, queue: str, result: bytes, output: bytes) -> str:
    """A job that wrote `output` while running and completed with `result`."""
    job_id = headgate.Client(store).enqueue("k", b"{}", queue=queue)
    claim = store.admit("w", [queue], capacity=1)[0]
    store.write_output(claim, output)
    store.ack(claim, Outcome.SUCCESS, result=result)
    return job_id


# -- 1. stored bytes never fail a page -------------------------------------------------------

@pytest.mark.parametrize("data", [DEEP, SURROGATE], ids=["deep", "surrogate"])
def test_a_payload_no_page_can_pretty_print_shows_as_text(store: Any, client: Any,
                                                          data: bytes) -> None:
    job_id = headgate.Client(store).enqueue("k", data, queue="q")
    resp = client.get(f"/jobs/{job_id}/payload")
    assert resp.status_code == 200
    body = text_of(resp)
    assert "shown as text" in body
    assert shown(data) in body


@pytest.mark.parametrize("data", [DEEP, SURROGATE], ids=["deep", "surrogate"])
def test_a_result_or_output_no_page_can_pretty_print_keeps_the_sheet_up(
        store: Any, client: Any, data: bytes) -> None:
    job_id = finished_with(store, "r", result=data, output=data)
    resp = client.get(f"/jobs?job={job_id}")
    assert resp.status_code == 200
    body = text_of(resp)
    assert body.count(shown(data)) == 2  # output and result


@pytest.mark.parametrize("data", [DEEP, SURROGATE], ids=["deep", "surrogate"])
def test_a_schedule_payload_no_page_can_pretty_print_keeps_the_edit_form_up(
        store: Any, client: Any, data: bytes) -> None:
    store.upsert_schedule({"id": "s", "kind": "k", "spec": "@every:60000", "queue": "q",
                           "payload": data})
    assert client.get("/periodic").status_code == 200
    assert client.get("/periodic?edit=s").status_code == 200


def test_the_live_sheet_of_such_a_job_still_arrives(store: Any, app: Any) -> None:
    from simple_websocket import Client as WsClient
    from werkzeug.serving import make_server

    job_id = finished_with(store, "r", result=SURROGATE, output=DEEP)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ws = WsClient.connect(f"ws://127.0.0.1:{server.server_port}/live?page=jobs")
        ws.send(json.dumps({"topics": [f"sheet:{job_id}"], "query": f"?job={job_id}"}))
        deadline = time.monotonic() + 8  # the sheet topic refreshes on the 2 s tick
        got = ""
        while time.monotonic() < deadline and 'id="sheet-body"' not in got:
            got = ws.receive(timeout=1) or ""
        ws.close()
    finally:
        server.shutdown()
    assert 'id="sheet-body"' in got
    assert shown(SURROGATE) in got
