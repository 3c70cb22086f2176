"""Routing and parsing edges that once answered wrongly, over real HTTP: static job
paths shadowed by `/jobs/{id}`, an empty `on_missed`, path parameters that lost an
encoded slash, `q` priorities Python's int() takes that are not plain 32-bit
decimals, and a Content-Type on answers with no body."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from headgate.api import idempotency
from headgate.api.jobs import STATIC_JOB_PATHS
from headgate.web.segments import Segment

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
# The methods of each static path (Werkzeug adds HEAD to GET; OPTIONS is a 405).
STATIC_ALLOW = {
    "counts": {"GET", "HEAD"},
    "actions": {"POST"},
    "bulk": {"POST"},
}


# -- static job paths beside /jobs/{id} ------------------------------------------------

def test_the_static_job_paths_are_all_known(api: Api) -> None:
    """A new static `/jobs/<name>` route must join STATIC_JOB_PATHS, or `/jobs/{id}`
    shadows it for the methods it lacks."""
    static = {
        rule.rule.removeprefix("/api/v1/jobs/")
        for rule in api.app.url_map.iter_rules()
        if re.fullmatch(r"/api/v1/jobs/[^/<]+", rule.rule)
    }
    assert static == set(STATIC_JOB_PATHS) == set(STATIC_ALLOW)


@pytest.mark.parametrize("name", sorted(STATIC_ALLOW))
def test_a_wrong_method_on_a_static_job_path_is_405(api: Api, name: str) -> None:
    """Even when a job has that id: it is not reachable at `/jobs/{name}`, and a
    DELETE there must not delete it."""
    assert api.enqueue(id=name) == name
    for method in METHODS:
        if method in STATIC_ALLOW[name]:
            continue
        r = api.request(method, f"/jobs/{name}", json={})
        assert r.status_code == 405, (method, r.text)
        if method != "HEAD":
            assert r.json() == {"error": "method not allowed"}
        assert set(r.headers["Allow"].split(", ")) == STATIC_ALLOW[name], method
    [job] = api.get("/jobs", params={"q": f"id:{name}"}).json()["jobs"]
    assert job["state"] == "available"
    # The routes below `/jobs/{id}` have no static sibling: they still address the job.
    assert api.get(f"/jobs/{name}/admission").status_code == 200
    assert api.post(f"/jobs/{name}/cancel").status_code == 204


def test_static_paths_keep_their_own_routes(api: Api) -> None:
    api.enqueue(id="counts")
    assert api.get("/jobs/counts").json()["counts"]["available"] == 1
    r = api.post("/jobs/actions", json={"action": "cancel", "ids": ["counts"]})
    assert r.json() == {"succeeded": ["counts"], "failed": []}
    r = api.post("/jobs/bulk", json={"action": "delete", "selector": {"queue": "default"},
                                     "dry_run": True})
    assert r.status_code == 202
    # Ids that only start or end like a static path are ordinary ids.
    for job_id in ("countsx", "xbulk", "actions/1"):
        api.enqueue(id=job_id)
        assert api.get("/jobs/" + job_id.replace("/", "%2F")).json()["id"] == job_id
        assert api.delete("/jobs/" + job_id.replace("/", "%2F")).status_code == 204


# -- periodic on_missed ----------------------------------------------------------------

@pytest.mark.parametrize("bad", ["", "SKIP", " skip", "never"])
def test_on_missed_must_be_a_known_policy(api: Api, bad: str) -> None:
    body = {"kind": "report.build", "spec": "0 3 * * *"}
    assert api.put("/periodic/nightly", json={**body, "on_missed": "run_once"}).status_code == 200
    r = api.put("/periodic/nightly", json={**body, "on_missed": bad, "priority": 9})
    assert (r.status_code, r.json()) == (400, {"error": "on_missed must be skip|run_once|backfill"})
    [s] = api.get("/periodic").json()
    assert (s["on_missed"], s["priority"]) == ("run_once", 0)


def test_on_missed_absent_or_null_is_skip(api: Api) -> None:
    body = {"kind": "report.build", "spec": "0 3 * * *"}
    assert api.put("/periodic/a", json=body).status_code == 200
    assert api.put("/periodic/b", json={**body, "on_missed": None}).status_code == 200
    assert [s["on_missed"] for s in api.get("/periodic").json()] == ["skip", "skip"]


# -- path parameters keep an encoded slash ---------------------------------------------

CONVERTER = re.compile(r"<(?:([^:>]+):)?[^>]+>")


def test_every_api_path_parameter_is_one_segment(api: Api) -> None:
    """Any other converter splits `a%2Fb` or hands the store the internal slash mark."""
    for rule in api.app.url_map.iter_rules():
        if not rule.rule.startswith("/api/"):
            continue
        for name in CONVERTER.findall(rule.rule):
            converter = api.app.url_map.converters[name or "default"]
            assert issubclass(converter, Segment), (rule.rule, name)


def test_a_fingerprint_with_an_encoded_slash(api: Api) -> None:
    r = api.delete("/quarantine/a%2Fb")
    assert (r.status_code, r.json()) == (
        404, {"error": "quarantined fingerprint not found: a/b"})


def test_an_operation_id_with_an_encoded_slash(api: Api) -> None:
    r = api.get("/operations/a%2Fb")
    assert (r.status_code, r.json()) == (404, {"error": "no such operation"})
    op = api.post("/jobs/bulk", json={"action": "cancel", "selector": {"queue": "q"},
                                      "dry_run": True}).json()
    assert api.get(f"/operations/{op['id']}").json()["id"] == op["id"]


# -- q priority: a plain 32-bit decimal -------------------------------------------------

@pytest.mark.parametrize("value", [
    "1_0", "\u0661", "\uff11", "+-1", "--1", "+", "-", "0x1", "1.0", "1e3",
    "2147483648", "-2147483649", "9" * 5000,
])
def test_a_priority_that_is_not_a_plain_32_bit_decimal_is_refused(api: Api, value: str) -> None:
    r = api.get("/jobs", params={"q": f"kind:k priority:{value}"})
    assert (r.status_code, r.json()) == (400, {"error": f"priority `{value}` is not a number"})


@pytest.mark.parametrize(("value", "expected"), [
    ("+5", 5), ("007", 7), ("-0", 0), ("2147483647", 2147483647),
    ("-2147483648", -2147483648), ("0" * 5000 + "7", 7),
])
def test_a_plain_32_bit_decimal_priority_is_taken(api: Api, value: str, expected: int) -> None:
    for priority in (expected, 1):
        api.enqueue(priority=priority, id=f"p{priority}")
    r = api.get("/jobs", params={"q": f"priority:{value}"})
    assert r.status_code == 200, r.text
    assert [j["priority"] for j in r.json()["jobs"]] == [expected]


# -- empty answers carry no Content-Type -----------------------------------------------

def assert_bare(r: object, status: int) -> None:
    assert (r.status_code, r.content) == (status, b""), r.text  # type: ignore[attr-defined]
    assert "Content-Type" not in r.headers, r.headers  # type: ignore[attr-defined]


def test_empty_answers_have_no_content_type(api: Api, quarantine) -> None:
    calls = [
        ("PUT", "/queues/q", {"weight": 2}, 200),
        ("PUT", "/queues/q/enqueue-limit", {"max_unfinished_jobs": 5}, 200),
        ("PUT", "/rate-classes/r", {"limit": 5, "window_ms": 1000}, 200),
        ("PUT", "/concurrency-limits/c",
         {"queue": "q", "max_concurrent": 1, "on_saturated": "queue"}, 200),
        ("PUT", "/periodic/p", {"kind": "k", "spec": "0 3 * * *"}, 200),
        ("POST", "/queues/q/pause", None, 204),
        ("DELETE", "/queues/q/enqueue-limit", None, 204),
        ("DELETE", "/periodic/p", None, 204),
    ]
    for method, path, body, status in calls:
        first = api.request(method, path, json=body, key=f"k-{path}")
        assert_bare(first, status)
        replay = api.request(method, path, json=body, key=f"k-{path}")
        assert replay.headers["Idempotent-Replayed"] == "true"
        assert_bare(replay, status)
    job_id = api.enqueue()
    assert_bare(api.delete(f"/jobs/{job_id}"), 204)
    fp = quarantine(api.store, "crashy", b"boom")
    r = api.delete(f"/quarantine/{fp}")
    assert_bare(r, 204)
    assert r.headers["x-released-jobs"] == "1"


def test_a_stored_empty_answer_replays_without_its_old_content_type(api: Api) -> None:
    """A key stored before empty answers went bare holds `text/html`; its replay
    must not bring that back."""
    body = b'{"weight": 2}'
    headers = {"Content-Type": "application/json", "Idempotency-Key": "old"}
    with api.app.test_request_context("/api/v1/queues/q", method="PUT", data=body,
                                      headers=headers):
        scope = idempotency.scope_key("old")
        assert api.store.idempotency_begin(scope, idempotency.request_hash()) is None
    api.store.idempotency_complete(scope, 200, {"Content-Type": "text/html; charset=utf-8"},
                                   b"")
    r = api.put("/queues/q", data=body, headers=headers)
    assert r.headers["Idempotent-Replayed"] == "true"
    assert_bare(r, 200)
    assert api.get("/queues").json() == []  # replayed, not run
