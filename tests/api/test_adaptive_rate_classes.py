"""Adaptive rate classes over /api/v1: the `adaptive` block in and out, the history
route, explain's word on the last cut, an HTTP worker's `throttled` failure, and bad
blocks refused with the error body, nothing changed."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from headgate.core import State
from headgate.services.forecasting import Forecaster

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

ADAPTIVE = {"min": 2, "max": 40, "decrease_factor": 0.8, "increase_step": 1}


def _class(api: Api, name: str) -> dict[str, Any]:
    return next(rc for rc in api.get("/rate-classes").json() if rc["name"] == name)


def test_put_and_get_the_adaptive_block(api: Api) -> None:
    r = api.put("/rate-classes/smtp", json={"limit": 15, "window_ms": 1000, "burst": 30,
                                            "adaptive": ADAPTIVE})
    assert (r.status_code, r.content) == (200, b"")
    rc = _class(api, "smtp")
    assert (rc["limit_per_window"], rc["burst"]) == (15, 30)
    assert {k: rc["adaptive"][k] for k in (*ADAPTIVE, "configured_limit", "configured_burst",
                                           "last_decrease_ms", "throttles_since_decrease")} \
        == {**ADAPTIVE, "configured_limit": 15, "configured_burst": 30,
            "last_decrease_ms": None, "throttles_since_decrease": 0}
    assert rc["adaptive"]["summary"] == (
        "rate class smtp is adaptive, at 15/s; no throttle has lowered it")
    [change] = api.get("/rate-classes/smtp/history").json()
    assert (change["change"], change["limit_per_window"]) == ("set", 15)
    # null (or leaving it out) makes the class fixed again.
    assert api.put("/rate-classes/smtp", json={"limit": 15, "window_ms": 1000,
                                               "adaptive": None}).ok
    assert _class(api, "smtp")["adaptive"] is None
    assert api.get("/rate-classes/nope/history").status_code == 404
    assert api.get("/rate-classes/smtp/history?limit=0").status_code == 400


@pytest.mark.parametrize(("body", "status", "error"), [
    ({"limit": 10, "adaptive": {**ADAPTIVE, "min": 50, "max": 20}}, 400,
     "adaptive.min must not be greater than adaptive.max"),
    ({"limit": 10, "adaptive": {**ADAPTIVE, "decrease_factor": 1}}, 400,
     "adaptive.decrease_factor must be greater than 0 and less than 1"),
    ({"limit": 10, "adaptive": {**ADAPTIVE, "decrease_factor": 0}}, 400,
     "adaptive.decrease_factor must be greater than 0 and less than 1"),
    ({"limit": 10, "adaptive": {**ADAPTIVE, "decrease_factor": -0.5}}, 400,
     "adaptive.decrease_factor must be greater than 0 and less than 1"),
    ({"limit": 10, "adaptive": {**ADAPTIVE, "increase_step": -1}}, 400,
     "adaptive.increase_step must be >= 0"),
    ({"limit": 10, "adaptive": {**ADAPTIVE, "min": 0}}, 400, "adaptive.min must be >= 1"),
    ({"limit": 90, "adaptive": ADAPTIVE}, 400,
     "limit must be within adaptive.min..adaptive.max (2..40)"),
    ({"limit": 10, "adaptive": {**ADAPTIVE, "decrease_factor": "0.5"}}, 422,
     "invalid request body"),
    ({"limit": 10, "adaptive": {"min": 1, "max": 5, "decrease_factor": 0.5}}, 422,
     "missing field `increase_step`"),
    ({"limit": 10, "adaptive": [1, 2]}, 422, "invalid request body"),
])
def test_bad_adaptive_blocks_change_nothing(api: Api, body: dict[str, Any], status: int,
                                            error: str) -> None:
    assert api.put("/rate-classes/smtp", json={"limit": 7, "window_ms": 1000}).ok
    before = _class(api, "smtp")
    audited = len(api.get("/audit").json()["entries"])
    r = api.put("/rate-classes/smtp", json={"window_ms": 500, **body})
    assert (r.status_code, r.json()) == (status, {"error": error})
    after = _class(api, "smtp")
    assert {k: after[k] for k in ("limit_per_window", "window_ms", "burst", "adaptive")} == {
        k: before[k] for k in ("limit_per_window", "window_ms", "burst", "adaptive")}
    assert api.get("/rate-classes/smtp/history").json() == []
    assert len(api.get("/audit").json()["entries"]) == audited


def test_http_worker_throttle_cuts_and_explain_says_so(api: Api) -> None:
    assert api.put("/rate-classes/smtp", json={"limit": 15, "window_ms": 1000,
                                               "adaptive": ADAPTIVE}).ok
    throttled = api.enqueue("k", queue="mail", rate_class="smtp")
    waiting = api.enqueue("k", queue="mail", rate_class="smtp")
    r = api.post("/workers", json={"queues": ["mail"], "capacity": 1, "agent": "t/1"})
    worker = r.json()["worker_id"]
    [job] = api.post(f"/workers/{worker}/claim", json={"max": 1}).json()["jobs"]
    assert job["id"] == throttled
    r = api.post(f"/workers/{worker}/jobs/{throttled}/fail",
                 json={"lease_id": job["lease_id"], "fence": job["fence"],
                       "error": "HTTP 429", "outcome": "throttled", "retry_in_ms": 60_000})
    assert r.json() == {"outcome": "throttled"}
    stored = api.store.get_job(throttled)
    assert stored is not None and stored.state is State.SCHEDULED
    assert stored.attempt == 0 and stored.errors == []
    rc = _class(api, "smtp")
    assert rc["limit_per_window"] == 12
    at = rc["adaptive"]["last_decrease_ms"]
    clock = time.strftime("%H:%M", time.gmtime(at / 1000))
    explained = api.get(f"/jobs/{waiting}/admission").json()
    assert explained["detail"]["adaptive"]["summary"] == (
        f"rate class smtp adapted down to 12/s after 1 throttle at {clock} UTC")
    assert explained["detail"]["adaptive"]["limit_per_window"] == 12
    # The start forecast reads the adapted limit, not the one set.
    assert Forecaster(api.store).rate_inputs()["smtp"].limit == 12
    changes = api.get("/rate-classes/smtp/history").json()
    assert [(c["change"], c["limit_per_window"], c["throttles"]) for c in changes] == [
        ("set", 15, 0), ("decrease", 12, 1)]
    # The audit records what the operator set, not the adapted limit.
    assert api.put("/rate-classes/smtp", json={"limit": 15, "window_ms": 1000,
                                               "adaptive": ADAPTIVE}).ok
    assert _class(api, "smtp")["limit_per_window"] == 12  # same settings: learning kept
    entry = api.get("/audit?target=rate_class:smtp").json()["entries"][0]
    assert entry["detail"]["before"]["limit"] == 15
    assert entry["detail"]["adaptive"] == ADAPTIVE
