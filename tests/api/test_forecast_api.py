"""Expected starts and what-if over real HTTP, on both engines, with the system at rest:
a registered worker whose slots are taken by claims nobody runs, so every prediction
follows from the inputs (docs/forecast.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import requests

from headgate.core.records import WorkerBeat
from headgate.services.config import Settings

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]

Q = "default"


def at_rest(api: Api, *, waiting: int, limit: int = 5) -> list[str]:
    """A class of `limit`/s with its burst spent by claims a worker holds, and `waiting`
    jobs behind them; the worker is registered and its slots partly busy."""
    assert api.put("/rate-classes/smtp", json={"limit": limit, "window_ms": 1000}).ok
    for i in range(limit):
        api.enqueue(payload=f"head{i}".encode(), rate_class="smtp")
    claimed = api.store.admit("w1", [Q], capacity=limit)
    assert len(claimed) == limit
    api.store.heartbeat(WorkerBeat("w1", queues=(Q,), concurrency=10, inflight=limit,
                                   status="running"))
    return [api.enqueue(payload=f"j{i}".encode(), rate_class="smtp") for i in range(waiting)]


def expected(api: Api, job_id: str) -> dict[str, Any]:
    r = api.get(f"/jobs/{job_id}/admission")
    assert r.status_code == 200, r.text
    return dict(r.json()["expected_start"])


def test_thirty_ahead_in_a_five_per_second_class(api: Api) -> None:
    ids = at_rest(api, waiting=31)
    answer = api.get(f"/jobs/{ids[30]}/admission").json()
    # However near the next token, the job's start is 31 tokens away at 5 a second.
    assert (answer["estimated_admission_ms"] or 0) < 1000
    start = answer["expected_start"]
    assert start["bound"] == "rate_class" and start["reason"] is None
    assert 5800 <= start["ms"] <= 6200
    assert start["p10_ms"] < start["ms"] < start["p90_ms"]
    assert start["p10_ms"] >= 4000 and start["p90_ms"] <= 8500
    # Earlier places start earlier, in the order admission takes them.
    starts = [expected(api, i)["ms"] for i in (ids[0], ids[10], ids[20], ids[30])]
    assert starts == sorted(starts) and starts[0] < 400


def test_nothing_can_be_known(api: Api) -> None:
    ids = at_rest(api, waiting=3)
    assert api.post(f"/queues/{Q}/pause").status_code == 204
    assert expected(api, ids[2])["reason"] == "queue_paused"
    assert api.post(f"/queues/{Q}/resume").status_code == 204
    assert api.put("/rate-classes/smtp", json={"limit": 5, "window_ms": 1000,
                                               "paused": True}).ok
    got = expected(api, ids[2])
    assert got == {"ms": None, "p10_ms": None, "p90_ms": None, "reason": "rate_class_paused",
                   "bound": None}
    assert api.put("/rate-classes/smtp", json={"limit": 5, "window_ms": 1000}).ok
    api.store.heartbeat(WorkerBeat("w1", queues=(Q,), concurrency=10, status="quiet"))
    assert expected(api, ids[2])["reason"] == "no_live_worker"
    pending = api.enqueue(payload=b"p", pending=True)
    assert expected(api, pending)["reason"] == "pending"
    head = api.get("/jobs", params={"state": "running"}).json()["jobs"][0]
    assert expected(api, head["id"])["reason"] == "not_waiting"


def test_simulated_double_limit_matches_the_model_at_that_limit(api: Api) -> None:
    at_rest(api, waiting=40)
    body = {"rate_class": {"name": "smtp", "limit": 10}}
    r = api.post("/simulate", json=body, key=False)
    assert r.status_code == 200, r.text
    sim = r.json()
    (row,) = sim["queues"]
    assert row["queue"] == Q and row["waiting"] == 40 and row["oldest_job_id"]
    before = row["before"]["time_to_drain"]["ms"]
    after = row["after"]["time_to_drain"]["ms"]
    assert 7000 <= before <= 8200 and 3500 <= after <= 4200  # 40 at 5/s, then at 10/s
    assert sim["after"]["time_to_drain"]["ms"] == after
    # Nothing changed: the class is as it was and the audit log holds no simulation.
    (rc,) = api.get("/rate-classes").json()
    assert (rc["limit_per_window"], rc["burst"]) == (5, 5)
    assert not [e for e in api.get("/audit").json()["entries"] if "simulate" in e["action"]]
    # Made for real, the model's own figure at 10/s agrees with the simulation's.
    assert api.put("/rate-classes/smtp", json={"limit": 10, "window_ms": 1000}).ok
    again = api.post("/simulate", json=body, key=False).json()["queues"][0]
    real = again["before"]["time_to_drain"]["ms"]
    assert abs(real - after) <= 0.1 * after + 300


def test_simulate_other_changes(api: Api) -> None:
    at_rest(api, waiting=20)
    assert api.put("/concurrency-limits/per-tenant", json={
        "queue": Q, "max_concurrent": 3, "on_saturated": "queue"}).ok
    r = api.post("/simulate", json={"concurrency_limit": {"name": "per-tenant",
                                                          "max_concurrent": 8},
                                    "worker_slots": {"add": 4}})
    assert r.status_code == 200, r.text
    sim = r.json()
    assert sim["change"]["concurrency_limit"]["queue"] == Q
    assert sim["change"]["worker_slots"] == {"add": 4, "queues": [Q]}
    assert [q["queue"] for q in sim["queues"]] == [Q]
    r = api.post("/simulate", json={"queue": {"name": Q, "weight": 3}})
    assert r.status_code == 200 and r.json()["change"]["queue"] == {"name": Q, "weight": 3}
    assert api.get("/queues").json()[0]["weight"] == 1


def test_bad_simulations_are_refused_and_change_nothing(api: Api) -> None:
    at_rest(api, waiting=2)
    cases = [
        ({"rate_class": {"name": "nope", "limit": 10}}, "unknown rate class `nope`"),
        ({"rate_class": {"name": "smtp", "limit": -1}}, "limit must be between 1 and "
                                                        "1000000000"),
        ({"rate_class": {"name": "smtp", "limit": 10**12}}, "limit must be between 1 and "
                                                            "1000000000"),
        ({"rate_class": {"name": "smtp", "burst": 0}}, "burst must be between 1 and "
                                                       "1000000000"),
        ({"rate_class": {"name": "smtp"}}, "rate_class needs limit, window_ms or burst"),
        ({"concurrency_limit": {"name": "nope", "max_concurrent": 2}},
         "unknown concurrency limit `nope`"),
        ({"queue": {"name": "nope", "weight": 2}}, "unknown queue `nope`"),
        ({"queue": {"name": Q, "weight": 0}}, "weight must be between 1 and 4294967295"),
        ({"worker_slots": {"add": 5, "queues": ["nope"]}}, "unknown queue `nope`"),
        ({"worker_slots": {"add": -3}}, "add must be between 1 and 1000000"),
        ({}, "name a change: rate_class, concurrency_limit, queue or worker_slots"),
    ]
    for body, message in cases:
        r = api.post("/simulate", json=body)
        assert (r.status_code, r.json()) == (400, {"error": message}), body
    r = api.post("/simulate", json={"rate_class": {"name": "smtp", "limit": "fast"}})
    assert (r.status_code, r.json()) == (422, {"error": "invalid request body"})
    (rc,) = api.get("/rate-classes").json()
    assert (rc["limit_per_window"], rc["burst"], rc["paused"]) == (5, 5, False)


def test_simulate_is_a_read(make_api) -> None:
    api = make_api(settings=Settings(read_only=True))
    r = requests.post(api.url + "/simulate", json={"worker_slots": {"add": 1}}, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["queues"] == [] and r.json()["after"]["time_to_drain"]["ms"] == 0
    ro = make_api(settings=Settings(api_read_tokens=("ro-token",)))
    r = requests.post(ro.url + "/simulate", json={"worker_slots": {"add": 1}},
                      headers={"Authorization": "Bearer ro-token"}, timeout=10)
    assert r.status_code == 200, r.text
    r = requests.post(ro.url + "/simulate", json={"worker_slots": {"add": 1}}, timeout=10)
    assert r.status_code == 401
