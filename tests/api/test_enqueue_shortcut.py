"""`POST /api/v1/jobs` answered beneath Flask (headgate/api/shortcut.py): the plain
request gets the full route's answer without reaching it, and every other request
reaches the route, which answers as it always has."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import flask
import pytest
from flask.json.provider import DefaultJSONProvider

from headgate.services.config import Settings

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]

BODY = {"kind": "mail.send", "payload": base64.b64encode(b'{"to": "a"}').decode(),
        "queue": "mail", "priority": 3, "tags": ["x"]}
ID = re.compile(rb'"[0-9a-f]{28}"')
FULL, READ, WORKER = "tok-full-aaaaaaaa", "tok-read-bbbbbbbb", "tok-work-cccccccc"


def route_calls(api: Api) -> list[str]:
    """The requests that reach the Flask app beneath the shortcut, from now on."""
    shortcut = api.app.extensions["headgate.api.shortcut"]
    inner, seen = shortcut.inner, []

    def counting(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        seen.append(environ["PATH_INFO"])
        return inner(environ, start_response)

    shortcut.inner = counting
    return seen


def answer(r: Any) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (but the date) and body with the job id blanked."""
    headers = {k: v for k, v in r.headers.items() if k not in ("Date", "Server")}
    return r.status_code, headers, ID.sub(b'"ID"', r.content)


def job_fields(api: Api, job_id: str) -> dict[str, Any]:
    doc = api.get(f"/jobs/{job_id}").json()
    return {k: v for k, v in doc.items() if not k.endswith("_ms") and k != "id"}


def hooked_twin(api: Api, make_api: Callable[..., Api]) -> tuple[Api, list[str]]:
    """A second app on the same store whose embedding added a hook of its own: the hook
    runs for every request, so its enqueues reach the route."""
    twin = make_api(store=api.store)
    hooked: list[str] = []
    twin.app.before_request(lambda: hooked.append(flask.request.path) and None)
    return twin, hooked


def test_a_plain_enqueue_is_answered_beneath_flask_as_the_route_answers_it(
        api: Api, make_api: Callable[..., Api]) -> None:
    twin, hooked = hooked_twin(api, make_api)
    seen, twin_seen = route_calls(api), route_calls(twin)
    first = api.post("/jobs", json=BODY, key="key-one")
    second = twin.post("/jobs", json=BODY, key="key-two")
    assert seen == [] and twin_seen == hooked == ["/api/v1/jobs"]
    assert first.status_code == 201
    assert answer(first) == answer(second)
    assert job_fields(api, first.json()["id"]) == job_fields(api, second.json()["id"])
    # The answers each stored replay alike too, whichever app replays them.
    one = twin.post("/jobs", json=BODY, key="key-one")
    two = api.post("/jobs", json=BODY, key="key-two")
    assert answer(one) == answer(two)
    assert one.headers["Idempotent-Replayed"] == "true" and one.json() == {
        "id": first.json()["id"], "replayed": True}
    assert api.store.counts()["available"] == 2


@pytest.mark.parametrize(("case", "status"), [
    ("query string", 201),
    ("other JSON content type", 201),
    ("text content type", 415),
    ("no Idempotency-Key", 400),
    ("bad JSON", 400),
    ("invalid field", 422),
    ("caller's unique key", 201),
])
def test_requests_it_does_not_answer_reach_the_route(api: Api, case: str, status: int) -> None:
    seen = route_calls(api)
    kw: dict[str, Any] = {"json": BODY}
    if case == "query string":
        r = api.post("/jobs?trace=1", **kw)
    elif case == "other JSON content type":
        r = api.post("/jobs", data=api_json(BODY),
                     headers={"Content-Type": "application/vnd.x+json"})
    elif case == "text content type":
        r = api.post("/jobs", data=api_json(BODY), headers={"Content-Type": "text/plain"})
    elif case == "no Idempotency-Key":
        r = api.post("/jobs", key=False, **kw)
    elif case == "bad JSON":
        r = api.post("/jobs", data=b'{"kind": ', headers={"Content-Type": "application/json"})
    elif case == "invalid field":
        r = api.post("/jobs", json={**BODY, "priority": "high"})
    else:
        r = api.post("/jobs", json={**BODY, "unique_key": base64.b64encode(b"u").decode()})
    assert r.status_code == status, r.text
    assert seen == ["/api/v1/jobs"]


def api_json(body: dict[str, Any]) -> bytes:
    import json

    return json.dumps(body).encode()


def test_a_used_key_reaches_the_route_which_replays_or_refuses(api: Api) -> None:
    first = api.post("/jobs", json=BODY, key="k")
    seen = route_calls(api)
    again = api.post("/jobs", json=BODY, key="k")
    other = api.post("/jobs", json={**BODY, "priority": 4}, key="k")
    assert (again.status_code, again.json()) == (201, {"id": first.json()["id"],
                                                       "replayed": True})
    assert other.status_code == 422
    assert seen == ["/api/v1/jobs"] * 2
    assert api.store.counts()["available"] == 1


def test_tokens_only_a_full_token_is_answered_beneath_flask(make_api: Callable[..., Api]) -> None:
    api = make_api(settings=Settings(api_tokens=(FULL,), api_read_tokens=(READ,),
                                     api_worker_tokens=(WORKER,), auth_failures_per_minute=2))
    seen = route_calls(api)

    def post(token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return api.post("/jobs", json=BODY, headers=headers).status_code

    assert post(FULL) == 201 and seen == []
    assert [post(READ), post(WORKER), post(None)] == [403, 403, 401]
    assert len(seen) == 3
    # Wrong tokens are counted once each (by the route), then even the right one waits.
    assert [post("wrong-1"), post("wrong-2"), post(FULL)] == [401, 401, 429]
    assert len(seen) == 6
    assert api.store.counts()["available"] == 1


def test_read_only_mode_reaches_the_route(make_api: Callable[..., Api]) -> None:
    api = make_api(settings=Settings(read_only=True))
    seen = route_calls(api)
    r = api.post("/jobs", json=BODY)
    assert (r.status_code, r.json()) == (403, {"error": "read-only mode"})
    assert seen == ["/api/v1/jobs"]


def test_embedding_hooks_reach_the_route(make_api: Callable[..., Api]) -> None:
    calls: list[str] = []

    def middleware(ctx: Any, batch: list[Any], call_next: Any) -> list[str]:
        calls.append(ctx.source)
        return call_next(batch)  # type: ignore[no-any-return]

    api = make_api(middleware=[middleware])
    seen = route_calls(api)
    assert api.post("/jobs", json=BODY).status_code == 201
    assert calls == ["http"] and seen == ["/api/v1/jobs"]


def test_a_store_error_is_answered_beneath_flask_as_the_route_answers_it(
        api: Api, make_api: Callable[..., Api]) -> None:
    twin, hooked = hooked_twin(api, make_api)
    assert api.put("/queues/mail/enqueue-limit",
                   json={"max_unfinished_jobs": 1}).status_code == 200
    api.post("/jobs", json=BODY)
    seen = route_calls(api)
    refused = api.post("/jobs", json=BODY)
    by_route = twin.post("/jobs", json=BODY)
    assert seen == [] and hooked == ["/api/v1/jobs"]
    assert refused.status_code == 429
    assert answer(refused) == answer(by_route)
    assert api.store.counts()["available"] == 1


def test_its_answers_are_counted_in_the_latency_metric(api: Api) -> None:
    seen = route_calls(api)
    for _ in range(3):
        assert api.post("/jobs", json=BODY).status_code == 201
    assert seen == []
    text = api.get("/metrics").text
    counted = {
        m.group(1): float(m.group(2)) for m in re.finditer(
            r'headgate_http_request_duration_seconds_count\{([^}]*)\} (\S+)', text)}
    assert counted['endpoint="api.enqueue",method="POST",status="201"'] == 3.0


def test_an_app_with_a_json_provider_of_its_own_reaches_the_route(
        make_api: Callable[..., Api]) -> None:
    class Pretty(DefaultJSONProvider):
        compact = False

    api = make_api()
    api.app.json = Pretty(api.app)
    seen = route_calls(api)
    r = api.post("/jobs", json=BODY)
    assert r.status_code == 201 and b'{\n  "id": ' in r.content
    assert seen == ["/api/v1/jobs"]
