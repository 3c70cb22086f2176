"""Names and ids may hold `/` (only their length is limited): every route that
addresses one by path reaches it when the slash is sent as `%2F` (one segment, decoded
after routing). A path with more segments than a route
still matches no route."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures


def encoded(name: str) -> str:
    return name.replace("/", "%2F")


@pytest.mark.parametrize("spelled", [encoded("billing/eu"), "billing%2feu"])
def test_a_queue_with_a_slash(api: Api, spelled: str) -> None:
    api.enqueue(queue="billing/eu")
    assert api.put(f"/queues/{spelled}", json={"weight": 3}).status_code == 200
    assert api.post(f"/queues/{spelled}/pause").status_code == 204
    [q] = api.get("/queues").json()
    assert (q["queue"], q["weight"], q["paused"]) == ("billing/eu", 3, True)
    assert api.post(f"/queues/{spelled}/resume").status_code == 204
    assert api.get(f"/queues/{spelled}/history").json()[0]["arrived"] == 1
    r = api.put(f"/queues/{spelled}/enqueue-limit", json={"max_unfinished_jobs": 5})
    assert r.status_code == 200
    assert api.get("/queues").json()[0]["max_unfinished_jobs"] == 5
    assert api.delete(f"/queues/{spelled}/enqueue-limit").status_code == 204
    assert api.delete(f"/queues/{spelled}?force=true").status_code in (200, 202)


def test_a_job_id_with_a_slash(api: Api) -> None:
    spelled = encoded("orders/42")
    assert api.enqueue(id="orders/42", pending=True) == "orders/42"
    assert api.get(f"/jobs/{spelled}").json()["id"] == "orders/42"
    assert api.get(f"/jobs/{spelled}/admission").status_code == 200
    assert api.post(f"/jobs/{spelled}/promote").status_code == 204
    assert api.get(f"/jobs/{spelled}").json()["state"] == "available"
    assert api.post(f"/jobs/{spelled}/cancel").status_code == 204
    assert api.get(f"/jobs/{spelled}").json()["state"] == "cancelled"
    assert api.delete(f"/jobs/{spelled}").status_code == 204
    assert api.get(f"/jobs/{spelled}").status_code == 404


def test_the_unencoded_form_is_more_segments(api: Api) -> None:
    """`/jobs/orders/42` is a job `orders` with an action `42`, which does not exist."""
    api.enqueue(id="orders/42")
    assert api.get("/jobs/orders/42").status_code == 404
    r = api.post("/queues/billing/eu/pause")
    assert (r.status_code, r.json()) == (404, {"error": "not found"})


def test_an_encoded_nul_is_still_refused(api: Api) -> None:
    """The slash mark is NUL, which no name may hold: a NUL sent as `%00` next to a `%2F`
    is refused as a NUL, never taken for a slash."""
    r = api.put("/queues/a%00b%2Fc", json={"weight": 2})
    assert (r.status_code, r.json()) == (400, {"error": "the URL path must not contain NUL"})
    assert api.get("/queues").json() == []


def test_policies_named_with_a_slash(api: Api) -> None:
    spelled = encoded("tier/gold")
    r = api.put(f"/rate-classes/{spelled}", json={"limit": 5, "window_ms": 1000})
    assert r.status_code == 200
    assert [rc["name"] for rc in api.get("/rate-classes").json()] == ["tier/gold"]
    r = api.put(f"/concurrency-limits/{spelled}",
                json={"queue": "q", "max_concurrent": 1, "on_saturated": "queue"})
    assert r.status_code == 200
    assert [c["name"] for c in api.get("/concurrency-limits").json()] == ["tier/gold"]


def test_a_schedule_id_with_a_slash(api: Api) -> None:
    spelled = encoded("reports/nightly")
    r = api.put(f"/periodic/{spelled}", json={"kind": "report.build", "spec": "0 3 * * *"})
    assert r.status_code in (200, 201), r.text
    assert [s["id"] for s in api.get("/periodic").json()] == ["reports/nightly"]
    assert api.get(f"/periodic/{spelled}/enqueue-events").status_code == 200
    assert api.post(f"/periodic/{spelled}/run").status_code in (200, 201, 202, 204)
    assert api.delete(f"/periodic/{spelled}").status_code == 204
    assert api.get("/periodic").json() == []
