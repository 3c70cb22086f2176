"""/api/v1/periodic…: schedules stored and validated over HTTP, events, run-now."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from headgate import EnqueueContext, Envelope

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

SCHEDULE_FIELDS = {
    "id", "kind", "queue", "spec", "next_run_ms", "last_enqueued_ms", "on_missed",
    "backfill_limit", "paused", "partition_key", "rate_class", "priority", "max_attempts",
    "retention_ms",
}


def test_put_list_delete(api: Api) -> None:
    assert api.get("/periodic").json() == []
    r = api.put("/periodic/nightly", json={"kind": "report.build", "spec": "0 3 * * *"})
    assert (r.status_code, r.content) == (200, b"")
    [s] = api.get("/periodic").json()
    assert set(s) == SCHEDULE_FIELDS
    assert (s["id"], s["kind"], s["queue"], s["spec"], s["on_missed"], s["max_attempts"],
            s["retention_ms"], s["paused"], s["last_enqueued_ms"]) == (
        "nightly", "report.build", "default", "0 3 * * *", "skip", 25, 0, False, None)
    assert s["next_run_ms"] % 60_000 == 0
    r = api.put("/periodic/nightly", json={
        "kind": "report.build", "spec": "CRON_TZ=Europe/Paris 0 3 * * *",
        "payload": base64.b64encode(b"p").decode(), "queue": "reports", "priority": 2,
        "partition_key": "acme", "rate_class": "r", "max_attempts": 3, "retention_ms": 5,
        "on_missed": "backfill", "backfill_limit": 4, "paused": True})
    assert r.status_code == 200
    [s] = api.get("/periodic?include_payload=true").json()
    assert (s["queue"], s["priority"], s["on_missed"], s["backfill_limit"], s["paused"]) == (
        "reports", 2, "backfill", 4, True)
    assert base64.b64decode(s["payload"]) == b"p"
    assert api.delete("/periodic/nightly").status_code == 204
    assert api.get("/periodic").json() == []
    r = api.delete("/periodic/nightly")
    assert (r.status_code, r.json()) == (404, {"error": "schedule not found: nightly"})


def test_put_rejections(api: Api) -> None:
    for body, status, error in (
        ({"kind": "k", "spec": "CRON_TZ=Mars/Olympus 0 3 * * *"}, 400,
         "unknown time zone in CRON_TZ: 'Mars/Olympus'"),
        ({"kind": "k", "spec": "@every:1000", "on_missed": "panic"}, 400,
         "on_missed must be skip|run_once|backfill"),
        ({"kind": "k", "spec": "@every:1000", "payload": "!"}, 400, "payload must be base64"),
        ({"kind": "k"}, 422, "missing field `spec`"),
        ({"spec": "@every:1000"}, 422, "missing field `kind`"),
        ({"kind": "k", "spec": "@every:1000", "priority": "high"}, 422,
         "invalid request body"),
        # Unicode digits: str.isdigit() took them and int() then raised (a 500).
        ({"kind": "k", "spec": "*/² * * * *"}, 400,
         "bad step '²' in minute field: must be an integer >= 1"),
        ({"kind": "k", "spec": "0 0 1-² * *"}, 400, "bad value '²' in day-of-month field"),
    ):
        r = api.put("/periodic/s", json=body)
        assert (r.status_code, r.json()) == (status, {"error": error}), body
    r = api.put("/periodic/s", json={"kind": "k", "spec": "every day"})
    assert r.status_code == 400 and r.json()["error"]
    assert api.get("/periodic").json() == []


def test_put_is_authorized_like_an_enqueue(make_api) -> None:
    def authorizer(context: EnqueueContext, envelope: Envelope) -> bool:
        return envelope.kind != "forbidden"

    api = make_api(enqueue_authorizer=authorizer)
    r = api.put("/periodic/s", json={"kind": "forbidden", "spec": "@every:60000"})
    assert (r.status_code, r.json()) == (403, {"error": "enqueue forbidden", "kind": "forbidden"})
    assert api.put("/periodic/s", json={"kind": "fine", "spec": "@every:60000"}).status_code == 200


def test_run_now_events_and_replay(api: Api) -> None:
    api.put("/periodic/every-minute", json={"kind": "tick", "spec": "@every:60000",
                                            "queue": "ticks"})
    r = api.post("/periodic/every-minute/run", key="run-1")
    assert r.status_code == 202
    job_id = r.json()["id"]
    assert r.json() == {"id": job_id}
    job = api.get(f"/jobs/{job_id}").json()
    assert (job["kind"], job["queue"]) == ("tick", "ticks")
    assert job["periodic_origin"]["schedule_id"] == "every-minute"
    # The same key again: the same job, marked as a replay, and no second job.
    again = api.post("/periodic/every-minute/run", key="run-1")
    assert (again.status_code, again.json()) == (202, {"id": job_id, "replayed": True})
    assert api.get("/jobs/counts?queue=ticks").json()["counts"]["available"] == 1
    events = api.get("/periodic/every-minute/enqueue-events").json()
    assert events["next_cursor"] is None
    [event] = events["events"]
    assert (event["schedule_id"], event["job_id"], event["outcome"], event["reason"]) == (
        "every-minute", job_id, "enqueued", "run_now")
    r = api.post("/periodic/ghost/run")
    assert (r.status_code, r.json()) == (404, {"error": "no such schedule"})


def test_enqueue_events_pagination(api: Api) -> None:
    api.put("/periodic/s", json={"kind": "tick", "spec": "@every:60000"})
    ids = [api.post("/periodic/s/run").json()["id"] for _ in range(3)]
    page = api.get("/periodic/s/enqueue-events?limit=2").json()
    assert [e["job_id"] for e in page["events"]] == ids[::-1][:2]
    assert page["next_cursor"] == page["events"][-1]["event_id"]
    rest = api.get(f"/periodic/s/enqueue-events?limit=2&cursor={page['next_cursor']}").json()
    assert [e["job_id"] for e in rest["events"]] == [ids[0]]
    assert rest["next_cursor"] is None
    r = api.get("/periodic/s/enqueue-events?limit=abc")
    assert (r.status_code, r.json()) == (400, {"error": "invalid query parameter `limit`"})
    r = api.get("/periodic/s/enqueue-events?cursor=-1")
    assert (r.status_code, r.json()) == (400, {"error": "invalid query parameter `cursor`"})
    assert api.get("/periodic/nobody/enqueue-events").json() == {"events": [],
                                                                   "next_cursor": None}
