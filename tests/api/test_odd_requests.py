"""Contract and operations residue, over real HTTP on both backends: zero
values read as "not set", bad path bytes and odd paths answered in JSON,
junk cursors refused."""

from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures


# -- zero values -----------------------------------------------------------------------

def test_zero_max_attempts_and_empty_queue_take_the_defaults_on_enqueue(api: Api) -> None:
    """A serializer that writes every field (no omitempty) sends 0 and "" for unset."""
    job_id = api.enqueue(queue="", max_attempts=0, priority=0, partition_key="")
    job = api.get(f"/jobs/{job_id}").json()
    assert (job["queue"], job["max_attempts"]) == ("default", 25)
    # Other fields keep their checks.
    r = api.post("/jobs", json={"kind": "k", "payload": "", "weight": 0})
    assert (r.status_code, r.json()) == (400, {"error": "weight must be >= 1"})
    assert api.get("/jobs/counts").json()["counts"]["available"] == 1


def test_zero_max_attempts_and_empty_queue_take_the_defaults_on_a_schedule(api: Api) -> None:
    r = api.put("/periodic/nightly", json={"kind": "tick", "spec": "@every:60000",
                                           "queue": "", "max_attempts": 0})
    assert r.status_code == 200, r.text
    [s] = api.get("/periodic").json()
    assert (s["queue"], s["max_attempts"]) == ("default", 25)
    r = api.post("/periodic/nightly/run")
    assert r.status_code == 202, r.text
    job = api.get(f"/jobs/{r.json()['id']}").json()
    assert (job["queue"], job["max_attempts"]) == ("default", 25)


# -- bad path bytes --------------------------------------------------------------------

def _param_routes(api: Api) -> list[tuple[str, str]]:
    """(method, path) for every /api/v1 route with a path parameter, each parameter
    given as `%FF`."""
    routes = []
    for rule in api.app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/") or not rule.arguments:
            continue
        path = re.sub(r"<[^>]+>", "%FF", rule.rule)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            routes.append((method, path))
    return routes


def test_a_path_segment_that_is_not_utf8_is_a_400_and_changes_nothing(api: Api) -> None:
    routes = _param_routes(api)
    assert ("POST", "/api/v1/queues/%FF/pause") in routes
    assert ("PUT", "/api/v1/periodic/%FF") in routes
    for method, path in routes:
        r = api.request(method, path, json={"kind": "k", "spec": "@every:1000", "weight": 2})
        assert (r.status_code, r.json()) == (400, {"error": "invalid path"}), (method, path)
    for path in ("/queues/%FE/pause", "/queues/ok%C3/resume", "/queues/a%2F%FF/pause"):
        r = api.post(path)
        assert (r.status_code, r.json()) == (400, {"error": "invalid path"}), path
    assert api.get("/queues").json() == []
    assert api.get("/periodic").json() == []
    # Valid UTF-8 still names a queue (é is %C3%A9).
    assert api.post("/queues/caf%C3%A9/pause").status_code == 204
    assert [q["queue"] for q in api.get("/queues").json()] == ["café"]


# -- JSON or empty under /api/v1 -------------------------------------------------------

@pytest.mark.parametrize("path", ["/api/v1//jobs", "/api//v1/jobs", "/api/v1/jobs//counts",
                                  "/api/v1/queues//pause"])
def test_a_doubled_slash_is_a_json_404_not_a_redirect(api: Api, path: str) -> None:
    for method in ("GET", "POST"):
        r = api.request(method, path, allow_redirects=False)
        assert r.status_code == 404, (method, path, r.status_code)
        assert r.headers["Content-Type"] == "application/json"
        assert r.json() == {"error": "not found"}
    assert api.get("/queues").json() == []


def test_options_is_a_405_naming_the_methods(api: Api) -> None:
    for path, allow in (("/jobs", {"GET", "HEAD", "POST"}),
                        ("/queues/q", {"PUT", "DELETE"}),
                        ("/jobs/counts", {"GET", "HEAD"})):
        r = api.request("OPTIONS", path)
        assert (r.status_code, r.json()) == (405, {"error": "method not allowed"}), path
        assert set(r.headers["Allow"].split(", ")) == allow, path
    r = api.request("OPTIONS", "/nope")
    assert (r.status_code, r.json()) == (404, {"error": "not found"})
    # A 405 of another method lists no OPTIONS either.
    r = api.request("PATCH", "/jobs")
    assert r.status_code == 405 and "OPTIONS" not in r.headers["Allow"]



# -- cursors ---------------------------------------------------------------------------

def test_a_junk_cursor_is_a_400_and_ours_page_on(api: Api) -> None:
    ids = sorted(api.enqueue() for _ in range(3))
    page = api.get("/jobs", params={"limit": 2}).json()
    assert [j["id"] for j in page["jobs"]] == ids[:0:-1]
    rest = api.get("/jobs", params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert ([j["id"] for j in rest["jobs"]], rest["next_cursor"]) == ([ids[0]], None)
    # Well-formed base64 of an id (what the cursor was before its check), a truncated
    # cursor of ours, made-up text, and characters no cursor has.
    plain = base64.urlsafe_b64encode(ids[1].encode()).decode().rstrip("=")
    for junk in (plain, page["next_cursor"][:-2], "YWJj", "AAAA", "!!!", "a b"):
        r = api.get("/jobs", params={"cursor": junk})
        assert (r.status_code, r.json()) == (
            400, {"error": "invalid query parameter `cursor`"}), junk
    # An empty cursor is the first page (a client that always sends the parameter).
    assert len(api.get("/jobs", params={"cursor": ""}).json()["jobs"]) == 3
