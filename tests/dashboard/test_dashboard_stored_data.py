"""Whatever a producer stored — payloads, results, output, schedules — the console shows
without failing and without altering it: a page never 500s on stored bytes, an edit
form saved unchanged writes back exactly what was stored, and payloads stay out of
pages until someone asks for one."""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import replace
from html.parser import HTMLParser
from typing import Any

import pytest
from markupsafe import escape
from support import serving

import headgate
from headgate.core import Outcome
from headgate.dashboard import live

DEEP = b"[" * 5000 + b"]" * 5000
SURROGATE = b'{"name": "\\ud800"}'


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

    job_id = finished_with(store, "r", result=SURROGATE, output=DEEP)
    with serving(app) as port:
        ws = WsClient.connect(f"ws://127.0.0.1:{port}/live?page=jobs")
        ws.send(json.dumps({"topics": [f"sheet:{job_id}"], "query": f"?job={job_id}"}))
        deadline = time.monotonic() + 8  # the sheet topic refreshes on the 2 s tick
        got = ""
        while time.monotonic() < deadline and 'id="sheet-body"' not in got:
            got = ws.receive(timeout=1) or ""
        ws.close()
    assert 'id="sheet-body"' in got
    assert shown(SURROGATE) in got


# -- 2. the periodic edit form saves back what it was given ---------------------------------

class FormFields(HTMLParser):
    """The named fields of the page's schedule form, as the browser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.in_form = False
        self.fields: dict[str, dict[str, Any]] = {}
        self._open: dict[str, Any] | None = None  # the textarea or select being read
        self._option_selected: bool | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and "/periodic/{id}" in a.get("hx-put", ""):
            self.in_form = True
        elif self.in_form and tag == "option":
            self._option_selected = "selected" in a
        elif self.in_form and "name" in a:
            field = {"tag": tag, **a, "value": a.get("value", ""), "options": []}
            self.fields[a["name"]] = field
            if tag in ("textarea", "select"):
                self._open = field

    def handle_data(self, data: str) -> None:
        if self._open is None:
            return
        if self._open["tag"] == "textarea":
            self._open["value"] += data
        elif self._option_selected is not None:
            self._open["options"].append((data, self._option_selected))
            self._option_selected = None

    def handle_endtag(self, tag: str) -> None:
        if tag == "select" and self._open is not None:
            options = self._open["options"]
            self._open["value"] = next((o for o, chosen in options if chosen), options[0][0])
        if tag in ("textarea", "select"):
            self._open = None
        elif tag == "form":
            self.in_form = False


def form_of(client: Any, schedule_id: str) -> dict[str, dict[str, Any]]:
    page = client.get(f"/periodic?edit={schedule_id}")
    assert page.status_code == 200
    parser = FormFields()
    parser.feed(text_of(page))
    return parser.fields


def unchanged_form_body(fields: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What headgate.js sends for the form submitted as rendered (the id goes in the
    path): numbers typed, checkboxes as booleans, and a textarea nobody touched sends
    its `data-original` bytes."""
    body: dict[str, Any] = {}
    for name, f in fields.items():
        if name == "id":
            continue
        if f.get("type") == "checkbox":
            body[name] = "checked" in f
        elif f.get("type") == "number":
            if f["value"] != "":
                body[name] = int(f["value"])
        elif f.get("data-json") == "base64":
            body[name] = f["data-original"]
        else:
            body[name] = f["value"]
    return body


BIG = json.dumps({"rows": ["x" * 100] * 1000}, separators=(",", ":")).encode()
KEPT = {
    "binary": b"\x00\xff\x10binary",
    "compact-json": b'{"a":1,"b":[1,2]}',
    "over-64-kib": BIG,
    "leading-newline-and-cr": b"\nline one\r\nline two\r",
}


@pytest.mark.parametrize("payload", list(KEPT.values()), ids=list(KEPT))
def test_saving_an_unchanged_edit_form_writes_back_the_stored_schedule(
        store: Any, client: Any, payload: bytes) -> None:
    resp = client.put("/api/v1/periodic/s", json={
        "kind": "k", "spec": "@every:60000", "queue": "q", "payload":
        base64.b64encode(payload).decode(), "retention_ms": 123_456, "priority": 3,
        "partition_key": "tenant a", "rate_class": "rc", "max_attempts": 7,
        "on_missed": "backfill", "backfill_limit": 4, "paused": True,
    }, headers={"Idempotency-Key": "create"})
    assert resp.status_code < 300, text_of(resp)
    before = store.get_schedule("s")
    body = unchanged_form_body(form_of(client, "s"))
    resp = client.put("/api/v1/periodic/s", json=body, headers={"Idempotency-Key": "save"})
    assert resp.status_code < 300, text_of(resp)
    after = store.get_schedule("s")
    assert after is not None and before is not None and after.payload == payload
    assert replace(after, updated_at_ms=0) == replace(before, updated_at_ms=0)


def test_only_utf8_text_of_a_readable_size_is_offered_for_editing(store: Any,
                                                                  client: Any) -> None:
    for sid, payload in KEPT.items():
        store.upsert_schedule({"id": sid, "kind": "k", "spec": "@every:60000",
                               "payload": payload})
    for sid in ("binary", "over-64-kib"):
        field = form_of(client, sid)["payload"]
        assert field["tag"] == "input" and field["type"] == "hidden"
        assert base64.b64decode(field["value"]) == KEPT[sid]
    text = form_of(client, "compact-json")["payload"]
    assert text["tag"] == "textarea"
    assert text["value"].strip() == '{"a":1,"b":[1,2]}'  # as stored, not re-indented



# -- 3. payloads stay out of the periodic page ------------------------------------------------

def test_the_periodic_page_and_its_live_rows_carry_no_payload(store: Any, app: Any,
                                                              client: Any) -> None:
    secret = b'{"card":"secret-card-number"}'
    store.upsert_schedule({"id": "s", "kind": "k", "spec": "@every:60000",
                           "payload": secret})
    forms = (base64.b64encode(secret).decode(), "secret-card-number")
    body = text_of(client.get("/periodic"))
    assert not [f for f in forms if f in body]
    # The button names the schedule and the state it asks for; headgate.js reads the
    # rest (payload included) from GET /api/v1/periodic?include_payload=true on click.
    button = re.search(r'<button[^>]*hx-put="/api/v1/periodic/s"[^>]*>', body)
    assert button and 'data-schedule-toggle="s"' in button.group(0)
    assert 'data-paused="true"' in button.group(0) and "data-body" not in button.group(0)
    with app.test_request_context("/live"):
        frame = live.load_topics(store, {"periodic"})
        rows = live.render_topic("periodic", frame["periodic"])
    assert 'data-schedule-toggle="s"' in rows
    assert not [f for f in forms if f in rows]
