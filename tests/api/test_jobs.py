"""/api/v1/jobs…: every route's success and documented errors, over real HTTP."""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING

import pytest

import headgate
from headgate import CircuitBreaker, EnqueueContext, Envelope, Outcome

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def run_one(api: Api, queue: str, *, outcome: Outcome | None = Outcome.SUCCESS,
            result: bytes | None = None) -> str:
    """Admit the only job of `queue`, report progress and output, then ack it."""
    claims = api.store.admit("worker-1", [queue], 1)
    assert len(claims) == 1
    claim = claims[0]
    api.store.report_progress(claim, 3, 10, "three of ten")
    api.store.write_output(claim, b"partial", 2)
    if outcome is not None:
        api.store.ack(claim, outcome, result=result)
    return claim.job.id


# -- enqueue ------------------------------------------------------------------------

def test_enqueue_defaults_and_get(api: Api) -> None:
    r = api.post("/jobs", json={"kind": "email.send", "payload": b64(b'{"to":"a"}')})
    assert r.status_code == 201
    job_id = r.json()["id"]
    assert r.json() == {"id": job_id}
    job = api.get(f"/jobs/{job_id}").json()
    assert job["queue"] == "default"
    assert job["state"] == "available"
    assert (job["priority"], job["weight"], job["max_attempts"], job["schema_version"]) == (
        0, 1, 25, 1)
    assert job["fingerprint"] == headgate.fingerprint("email.send", b'{"to":"a"}')
    assert job["periodic_origin"] is None
    assert job["orphaned"] is False
    assert job["errors"] == [] and job["tags"] == []
    assert "payload" not in job  # hidden unless asked for
    with_payload = api.get(f"/jobs/{job_id}?include_payload=true").json()
    assert base64.b64decode(with_payload["payload"]) == b'{"to":"a"}'


def test_enqueue_all_fields(api: Api) -> None:
    body = {
        "kind": "report.build", "payload": b64(b"x"), "queue": "reports", "priority": 5,
        "partition_key": "acme", "rate_class": "smtp", "weight": 3,
        "scheduled_at_ms": int(time.time() * 1000) + 3_600_000, "tags": ["b", "a", "b"],
        "max_attempts": 3, "retention_ms": 0, "id": "my-id-1", "sticky_worker": "w9",
        "headers": {"traceparent": "00-abc"}, "schema_version": 2,
    }
    r = api.post("/jobs", json=body)
    assert r.status_code == 201 and r.json() == {"id": "my-id-1"}
    job = api.get("/jobs/my-id-1").json()
    assert job["state"] == "scheduled"
    assert job["tags"] == ["a", "b"]
    assert (job["queue"], job["priority"], job["partition_key"], job["rate_class"],
            job["weight"], job["max_attempts"], job["retention_ms"], job["sticky_worker"],
            job["schema_version"]) == ("reports", 5, "acme", "smtp", 3, 3, 0, "w9", 2)
    assert job["headers"] == {"traceparent": "00-abc"}


def test_enqueue_pending(api: Api) -> None:
    job_id = api.enqueue(pending=True)
    assert api.get(f"/jobs/{job_id}").json()["state"] == "pending"


@pytest.mark.parametrize(("body", "status", "error"), [
    ({"kind": "k", "payload": "aGk=", "weight": 0}, 400, "weight must be >= 1"),
    ({"kind": "k", "payload": "not base64!"}, 400, "payload must be base64"),
    ({"kind": "k", "payload": "aGk"}, 400, "payload must be base64"),
    ({"kind": "k", "payload": "aGk=", "unique_key": "%%"}, 400, "unique_key must be base64"),
    ({"kind": "k", "payload": "aGk=", "unique_replace": 1}, 400,
     "unique_replace requires caller-supplied unique_key"),
    ({"kind": "", "payload": "aGk="}, 400, "kind must not be empty"),
    ({"kind": "k", "payload": "aGk=", "scheduled_at_ms": -1}, 400,
     "scheduled_at_ms must be >= 0"),
    ({"kind": "k", "payload": "aGk=", "unique_key": "aGk=", "unique_replace": 16}, 400,
     "unique_replace must be <= 15"),
    ({"payload": "aGk="}, 422, "missing field `kind`"),
    ({"kind": "k"}, 422, "missing field `payload`"),
    ({"kind": 5, "payload": "aGk="}, 422, "invalid request body"),
    ({"kind": "k", "payload": "aGk=", "priority": "high"}, 422, "invalid request body"),
    ({"kind": "k", "payload": "aGk=", "priority": 2**31}, 422, "invalid request body"),
    ({"kind": "k", "payload": "aGk=", "weight": -1}, 422, "invalid request body"),
    ({"kind": "k", "payload": "aGk=", "weight": 1.5}, 422, "invalid request body"),
    ({"kind": "k", "payload": "aGk=", "tags": "a"}, 422, "invalid request body"),
    ({"kind": "k", "payload": "aGk=", "pending": None}, 422, "invalid request body"),
    ({"kind": None, "payload": "aGk="}, 422, "invalid request body"),
    ([1, 2], 422, "invalid request body"),
])
def test_enqueue_rejections(api: Api, body: object, status: int, error: str) -> None:
    r = api.post("/jobs", json=body)
    assert (r.status_code, r.json()) == (status, {"error": error})
    assert api.get("/jobs/counts").json()["counts"]["available"] == 0  # nothing written


def test_enqueue_null_optional_fields_mean_defaults(api: Api) -> None:
    r = api.post("/jobs", json={"kind": "k", "payload": "", "queue": None, "priority": None})
    assert r.status_code == 201
    assert api.get(f"/jobs/{r.json()['id']}").json()["queue"] == "default"


def test_enqueue_body_rejections(api: Api) -> None:
    r = api.post("/jobs", data=b'{"kind":"k","payload":""}')
    assert (r.status_code, r.json()) == (415, {"error": "expected Content-Type: application/json"})
    r = api.post("/jobs", data=b'{"kind":', headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()) == (400, {"error": "bad json"})
    r = api.post("/jobs", data=b"", headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()) == (400, {"error": "bad json"})
    r = api.post("/jobs", data=b'{"kind":"\\ud800","payload":""}',
                 headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()) == (400, {"error": "bad json"})
    r = api.post("/jobs", data=b'{"kind":"k","payload":NaN}',
                 headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()) == (400, {"error": "bad json"})
    r = api.post("/jobs", data=b'{"kind":"a","kind":"b","payload":""}',
                 headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()) == (422, {"error": "invalid request body"})
    # +json media types are JSON too; unknown fields are ignored.
    r = api.post("/jobs", data=b'{"kind":"k","payload":"","extra":1}',
                 headers={"Content-Type": "application/vnd.api+json; charset=utf-8"})
    assert r.status_code == 201


def test_enqueue_duplicate_unique_key_is_structured_409(api: Api) -> None:
    first = api.enqueue(unique_key=b64(b"order-1"))
    r = api.post("/jobs", json={"kind": "email.send", "payload": b64(b"{}"),
                                "unique_key": b64(b"order-1")})
    assert r.status_code == 409
    assert r.json() == {"error": "duplicate unique key", "existing_id": first, "replaced": False}


def test_enqueue_id_conflict(api: Api) -> None:
    api.enqueue(id="fixed", payload=b"one")
    same = api.post("/jobs", json={"kind": "email.send", "payload": b64(b"one"), "id": "fixed"})
    assert same.status_code == 201 and same.json()["id"] == "fixed"  # same content: fine
    r = api.post("/jobs", json={"kind": "email.send", "payload": b64(b"two"), "id": "fixed"})
    assert (r.status_code, r.json()) == (409, {"error": "id conflict: job fixed"})


def test_enqueue_quarantined_is_423(api: Api, quarantine) -> None:
    fp = quarantine(api.store, "crashy", b"boom")
    r = api.post("/jobs", json={"kind": "crashy", "payload": b64(b"boom")})
    assert (r.status_code, r.json()) == (
        423, {"error": "fingerprint is quarantined", "fingerprint": fp})


def test_enqueue_backpressure_is_structured_429(api: Api) -> None:
    assert api.put("/queues/bulk/enqueue-limit", json={"max_unfinished_jobs": 1}).status_code == 200
    api.enqueue(queue="bulk")
    r = api.post("/jobs", json={"kind": "k", "payload": "", "queue": "bulk"})
    assert r.status_code == 429
    assert r.json() == {"error": "enqueue backpressure", "queue": "bulk", "limit": 1,
                        "current": 1, "incoming": 1}


def test_enqueue_authorizer_sees_identity_from_request(make_api) -> None:
    seen: list[object] = []

    def authorizer(context: EnqueueContext, envelope: Envelope) -> bool:
        seen.append((context.source, context.identity))
        return envelope.kind != "admin.wipe"

    api = make_api(enqueue_authorizer=authorizer,
                   identity_from_request=lambda request: request.headers.get("X-User"))
    assert api.post("/jobs", json={"kind": "ok", "payload": ""},
                    headers={"X-User": "alice"}).status_code == 201
    r = api.post("/jobs", json={"kind": "admin.wipe", "payload": ""}, headers={"X-User": "bob"})
    assert (r.status_code, r.json()) == (403, {"error": "enqueue forbidden", "kind": "admin.wipe"})
    assert seen == [("http", "alice"), ("http", "bob")]


def test_enqueue_circuit_open_is_503(make_api) -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_after_ms=60_000)
    breaker.record(False)  # one store outage opens it
    api = make_api(circuit_breaker=breaker)
    r = api.post("/jobs", json={"kind": "k", "payload": ""})
    assert r.status_code == 503
    body = r.json()
    assert body["error"] == "enqueue circuit open" and body["state"] == "open"
    assert 0 < body["retry_after_ms"] <= 60_000
    assert int(r.headers["Retry-After"]) >= 1


def test_enqueue_middleware_hooks_and_plugins_run(make_api) -> None:
    calls: list[str] = []

    def tagger(context, batch, call_next):
        calls.append("middleware")
        return call_next([headgate.Envelope(**{**_fields(e), "tags": ["via-mw"]})
                          for e in batch])

    class Hook:
        def before_insert(self, context, envelopes):
            calls.append("before")

        def after_insert(self, context, envelopes, ids, error):
            calls.append("after")

    plugin = headgate.Plugin("p", middleware=[lambda c, b, n: (calls.append("plugin"), n(b))[1]])
    api = make_api(middleware=[tagger], insert_hooks=[Hook()], plugins=[plugin])
    job_id = api.enqueue()
    assert api.get(f"/jobs/{job_id}").json()["tags"] == ["via-mw"]
    assert calls == ["before", "middleware", "plugin", "after"]


def _fields(env: Envelope) -> dict:
    import dataclasses

    return {f.name: getattr(env, f.name) for f in dataclasses.fields(env)}


# -- list, q grammar, counts ----------------------------------------------------------

def test_list_jobs_pagination_and_filters(api: Api) -> None:
    ids = [api.enqueue(kind="email.send", queue="mail", tags=["t1"]) for _ in range(5)]
    ids += [api.enqueue(kind="report.build", queue="rep", partition_key="acme",
                        tags=["t1", "t2"], priority=7) for _ in range(3)]
    page = api.get("/jobs?limit=3").json()
    assert [j["id"] for j in page["jobs"]] == ids[::-1][:3]
    assert page["count_is_approximate"] is False and page["next_cursor"]
    seen = [j["id"] for j in page["jobs"]]
    while page["next_cursor"]:
        page = api.get("/jobs", params={"limit": 3, "cursor": page["next_cursor"]}).json()
        seen += [j["id"] for j in page["jobs"]]
    assert seen == ids[::-1]
    assert len(api.get("/jobs").json()["jobs"]) == 8  # default limit 50
    assert {j["queue"] for j in api.get("/jobs?queue=rep").json()["jobs"]} == {"rep"}
    assert len(api.get("/jobs?kind=email.send").json()["jobs"]) == 5
    assert len(api.get("/jobs?partition_key=acme").json()["jobs"]) == 3
    assert len(api.get("/jobs?state=available").json()["jobs"]) == 8
    assert len(api.get("/jobs?tags_all=t1,t2").json()["jobs"]) == 3
    assert len(api.get("/jobs?tags_any=t2,zzz").json()["jobs"]) == 3
    assert len(api.get("/jobs?tags_any=t1").json()["jobs"]) == 8
    assert all("payload" not in j for j in api.get("/jobs").json()["jobs"])
    assert all("payload" in j for j in api.get("/jobs?include_payload=true").json()["jobs"])


def test_q_grammar(api: Api) -> None:
    a = api.enqueue(kind="email.send", queue="mail", partition_key="acme", tags=["vip"],
                    priority=3, rate_class="smtp")
    b = api.enqueue(kind="email.digest", queue="mail")
    c = api.enqueue(kind="report.build", queue="rep", tags=["other"])

    def q(text: str) -> list[str]:
        r = api.get("/jobs", params={"q": text})
        assert r.status_code == 200, r.text
        return sorted(j["id"] for j in r.json()["jobs"])

    assert q("email") == sorted([a, b])  # bare term: kind prefix
    assert q("queue:mail partition:acme") == [a]
    assert q(f"id:{c}") == [c]
    assert q("kind:email.digest") == [b]
    assert q("state:available queue:rep") == [c]
    assert q("rate_class:smtp") == [a]
    assert q("tag:vip") == [a]
    assert q("tag_any:vip tag_any:other") == sorted([a, c])
    assert q("priority:3") == [a]
    assert q(f"fingerprint:{headgate.fingerprint('report.build', b'{}')}") == [c]
    assert q("  email   queue:mail  ") == sorted([a, b])


def test_kind_prefix_pages_every_kind_it_starts_newest_first(api: Api) -> None:
    """A bare search term is a kind prefix: its pages hold the jobs of every kind that
    starts with it, newest first, whatever the store's plan (SQLite pages each kind and
    merges; past 32 kinds one query filters the range)."""
    kinds = ["email", "email.send", "email.digest", "emailz", "emaik", "emaim", "e", "mail"]
    made: dict[str, list[str]] = {k: [] for k in kinds}
    for i in range(24):
        kind = kinds[i % len(kinds)]
        made[kind].append(api.enqueue(kind=kind, queue="q", tags=["odd" if i % 2 else "even"]))
    many = [api.enqueue(kind=f"bulk.{n:02d}", queue="q") for n in range(34)]

    def pages(params: dict[str, str]) -> list[str]:
        seen: list[str] = []
        page = api.get("/jobs", params={**params, "limit": 5}).json()
        seen += [j["id"] for j in page["jobs"]]
        while page["next_cursor"]:
            page = api.get("/jobs", params={**params, "limit": 5,
                                             "cursor": page["next_cursor"]}).json()
            seen += [j["id"] for j in page["jobs"]]
        return seen

    email = [i for k in kinds if k.startswith("email") for i in made[k]]
    assert pages({"q": "email"}) == sorted(email, reverse=True)
    assert pages({"q": "email tag:odd"}) == sorted(
        (i for i in email if api.get(f"/jobs/{i}").json()["tags"] == ["odd"]), reverse=True)
    assert pages({"q": "email", "queue": "q"}) == sorted(email, reverse=True)
    assert pages({"q": "emailz."}) == []
    assert pages({"q": "bulk."}) == sorted(many, reverse=True)


@pytest.mark.parametrize(("params", "error"), [
    ({"q": "colour:red"}, "unknown search field `colour`"),
    ({"q": "priority:high"}, "priority `high` is not a number"),
    ({"q": "priority:"}, "priority `` is not a number"),
    ({"limit": "abc"}, "invalid query parameter `limit`"),
    ({"limit": "-1"}, "invalid query parameter `limit`"),
    ({"limit": ""}, "invalid query parameter `limit`"),
    ({"include_payload": "yes"}, "invalid query parameter `include_payload`"),
    ({"limit": "0"}, "limit must be between 1 and 200"),
    ({"limit": "201"}, "limit must be between 1 and 200"),
    ({"state": "nope"}, "unknown state `nope`"),
    ({"cursor": "!!!"}, "invalid query parameter `cursor`"),
])
def test_list_jobs_rejections(api: Api, params: dict, error: str) -> None:
    """`?limit=abc` is a 400, never a silent fall back to the default."""
    r = api.get("/jobs", params=params)
    assert (r.status_code, r.json()) == (400, {"error": error})


def test_duplicate_query_parameter_is_400(api: Api) -> None:
    r = api.get("/jobs?limit=1&limit=2")
    assert (r.status_code, r.json()) == (400, {"error": "invalid query string"})


def test_counts(api: Api) -> None:
    api.enqueue(queue="a")
    api.enqueue(queue="a")
    api.enqueue(queue="b", pending=True)
    body = api.get("/jobs/counts").json()
    assert body["approximate"] is False
    assert body["counts"]["available"] == 2 and body["counts"]["pending"] == 1
    assert set(body["counts"]) == {"pending", "scheduled", "available", "running", "retryable",
                                   "completed", "archived", "cancelled", "quarantined",
                                   "undecodable"}
    assert api.get("/jobs/counts?queue=b").json()["counts"]["available"] == 0


# -- actions --------------------------------------------------------------------------

def test_actions(api: Api) -> None:
    a, b, c = (api.enqueue() for _ in range(3))
    r = api.post("/jobs/actions", json={"action": "cancel", "ids": [a, b, "ghost"]})
    assert r.status_code == 200
    assert r.json() == {"succeeded": [a, b],
                        "failed": [{"id": "ghost", "reason": "job not found: ghost"}]}
    r = api.post("/jobs/actions", json={"action": "retry", "ids": [a, c]})
    assert r.json() == {"succeeded": [a], "failed": [
        {"id": c, "reason": "cannot operator retry a job in state available"}]}
    r = api.post("/jobs/actions", json={"action": "archive", "ids": [c]})
    assert r.json() == {"succeeded": [], "failed": [
        {"id": c, "reason": "operator_archive is not in the transition table"}]}
    r = api.post("/jobs/actions", json={"action": "delete", "ids": [c]})
    assert r.json() == {"succeeded": [c], "failed": []}
    assert api.get(f"/jobs/{c}").status_code == 404


def test_actions_rejections(api: Api) -> None:
    r = api.post("/jobs/actions", json={"action": "explode", "ids": ["x"]})
    assert (r.status_code, r.json()) == (400, {"error": "unknown action `explode`"})
    r = api.post("/jobs/actions", json={"action": "cancel", "ids": [str(i) for i in range(1001)]})
    assert (r.status_code, r.json()) == (400, {"error": "at most 1000 ids per call"})
    r = api.post("/jobs/actions", json={"action": "cancel"})
    assert (r.status_code, r.json()) == (422, {"error": "missing field `ids`"})
    r = api.post("/jobs/actions", json={"action": "cancel", "ids": [1]})
    assert (r.status_code, r.json()) == (422, {"error": "invalid request body"})


# -- one job ------------------------------------------------------------------------

def test_get_and_delete_job(api: Api) -> None:
    job_id = api.enqueue()
    assert api.get(f"/jobs/{job_id}").status_code == 200
    r = api.get("/jobs/nope")
    assert (r.status_code, r.json()) == (404, {"error": "no such job"})
    r = api.delete(f"/jobs/{job_id}")
    assert (r.status_code, r.content) == (204, b"")
    r = api.delete(f"/jobs/{job_id}")
    assert (r.status_code, r.json()) == (404, {"error": f"job not found: {job_id}"})


def test_result_output_progress(api: Api) -> None:
    job_id = api.enqueue(queue="work")
    for part, message in (("result", "no result for job"), ("output", "no output for job"),
                          ("progress", "no progress for job")):
        r = api.get(f"/jobs/{job_id}/{part}")
        assert (r.status_code, r.json()) == (404, {"error": message})
    run_one(api, "work", result=b"answer")
    assert api.get(f"/jobs/{job_id}/result").json() == {
        "schema_version": 1, "bytes": b64(b"answer")}
    output = api.get(f"/jobs/{job_id}/output").json()
    assert (output["schema_version"], output["bytes"], output["fence"]) == (2, b64(b"partial"), 1)
    assert output["updated_at_ms"] > 0
    progress = api.get(f"/jobs/{job_id}/progress").json()
    assert (progress["current"], progress["total"], progress["message"], progress["fence"]) == (
        3, 10, "three of ten", 1)
    job = api.get(f"/jobs/{job_id}").json()
    assert job["state"] == "completed" and job["finalized_at_ms"] is not None
    assert job["attempted_at_ms"] is not None and job["worker_id"] == "worker-1"


def test_retry_cancel_promote(api: Api) -> None:
    job_id = api.enqueue(queue="w")
    r = api.post(f"/jobs/{job_id}/retry")
    assert (r.status_code, r.json()) == (
        409, {"error": "cannot operator retry a job in state available"})
    assert api.post(f"/jobs/{job_id}/cancel").status_code == 204
    assert api.get(f"/jobs/{job_id}").json()["state"] == "cancelled"
    r = api.post(f"/jobs/{job_id}/cancel")
    assert r.status_code == 409
    assert (r2 := api.post(f"/jobs/{job_id}/retry")).status_code == 204, r2.text
    assert api.get(f"/jobs/{job_id}").json()["state"] == "available"
    pending = api.enqueue(pending=True)
    assert api.post(f"/jobs/{pending}/promote").status_code == 204
    assert api.get(f"/jobs/{pending}").json()["state"] == "available"
    r = api.post(f"/jobs/{pending}/promote")
    assert (r.status_code, r.json()) == (
        409, {"error": "cannot operator promote a job in state available"})
    for action in ("retry", "cancel", "promote"):
        r = api.post(f"/jobs/ghost/{action}")
        assert (r.status_code, r.json()) == (404, {"error": "job not found: ghost"})


def test_retry_of_undecodable_jobs(make_api) -> None:
    """An undecodable job (its handler was missing) runs again once retried: one by
    id, several by /jobs/actions, the rest by a bulk retry of the state."""
    api = make_api(background=False)
    ids = [api.enqueue(kind="not.deployed", queue="undec", max_attempts=1) for _ in range(4)]
    for claim in api.store.admit("worker-1", ["undec"], 4):
        api.store.ack(claim, Outcome.UNDECODABLE, error="no handler for not.deployed")
    assert api.get("/jobs/counts?queue=undec").json()["counts"]["undecodable"] == 4
    assert (r := api.post(f"/jobs/{ids[0]}/retry")).status_code == 204, r.text
    job = api.get(f"/jobs/{ids[0]}").json()
    assert job["state"] == "available" and job["finalized_at_ms"] is None
    assert job["max_attempts"] > job["attempt"]
    r = api.post("/jobs/actions", json={"action": "retry", "ids": [ids[1], ids[0]]})
    assert r.json() == {"succeeded": [ids[1]], "failed": [
        {"id": ids[0], "reason": "cannot operator retry a job in state available"}]}
    dry = api.post("/jobs/bulk", json={"action": "retry", "dry_run": True,
                                       "selector": {"queue": "undec", "state": "undecodable"}})
    assert dry.status_code == 202 and dry.json()["total_estimated"] == 2
    op = api.post("/jobs/bulk", json={"action": "retry",
                                      "selector": {"queue": "undec", "state": "undecodable"}})
    while api.store.run_operations_batch(100):
        pass
    assert api.get(f"/operations/{op.json()['id']}").json()["affected"] == 2
    counts = api.get("/jobs/counts?queue=undec").json()["counts"]
    assert (counts["undecodable"], counts["available"]) == (0, 4)


def test_running_job_cancel_and_orphaned(api: Api) -> None:
    job_id = api.enqueue(queue="lease")
    claims = api.store.admit("w", ["lease"], 1, lease_ms=30)
    assert claims
    time.sleep(0.1)
    assert api.get(f"/jobs/{job_id}").json()["orphaned"] is True
    assert api.post(f"/jobs/{job_id}/cancel").status_code == 204
    job = api.get(f"/jobs/{job_id}").json()
    assert job["state"] == "cancelled" and job["cancel_requested"] is True


def test_reschedule(api: Api) -> None:
    later = int(time.time() * 1000) + 3_600_000
    job_id = api.enqueue(scheduled_at_ms=later)
    r = api.post(f"/jobs/{job_id}/reschedule", json={"scheduled_at_ms": later + 1000})
    assert r.status_code == 204
    assert api.get(f"/jobs/{job_id}").json()["scheduled_at_ms"] == later + 1000
    available = api.enqueue()
    r = api.post(f"/jobs/{available}/reschedule", json={"scheduled_at_ms": later})
    assert r.status_code == 409
    assert r.json()["error"].startswith("cannot reschedule a job in state available")
    r = api.post(f"/jobs/{job_id}/reschedule", json={"scheduled_at_ms": -5})
    assert (r.status_code, r.json()) == (400, {"error": "scheduled_at_ms must be >= 0"})
    r = api.post(f"/jobs/{job_id}/reschedule", json={})
    assert (r.status_code, r.json()) == (422, {"error": "missing field `scheduled_at_ms`"})
    r = api.post("/jobs/ghost/reschedule", json={"scheduled_at_ms": later})
    assert r.status_code == 404


def test_edit_payload_changes_fingerprint(api: Api) -> None:
    job_id = api.enqueue(kind="k", payload=b"old")
    r = api.put(f"/jobs/{job_id}/payload", json={"payload": b64(b"new"), "schema_version": 4})
    assert r.status_code == 204
    job = api.get(f"/jobs/{job_id}?include_payload=true").json()
    assert base64.b64decode(job["payload"]) == b"new"
    assert job["fingerprint"] == headgate.fingerprint("k", b"new")
    assert job["schema_version"] == 4
    r = api.put(f"/jobs/{job_id}/payload", json={"payload": "@@"})
    assert (r.status_code, r.json()) == (400, {"error": "payload must be base64"})
    r = api.put("/jobs/ghost/payload", json={"payload": b64(b"x")})
    assert (r.status_code, r.json()) == (404, {"error": "no such job"})
    api.store.admit("w", ["default"], 1)
    r = api.put(f"/jobs/{job_id}/payload", json={"payload": b64(b"x")})
    assert (r.status_code, r.json()) == (409, {"error": "cannot edit the payload of a running job"})


def test_admission_explain(api: Api) -> None:
    job_id = api.enqueue(queue="gate", rate_class="slow")
    body = api.get(f"/jobs/{job_id}/admission").json()
    assert body == {"admissible": True, "blocked_by": None,
                    "detail": {"state": "available", "queue": "gate", "partition_key": "",
                               "position_in_partition": 0},
                    "estimated_admission_ms": 0,
                    # Admissible, but no worker serves the queue: no start to predict.
                    "expected_start": {"ms": None, "p10_ms": None, "p90_ms": None,
                                       "bound": None, "reason": "no_live_worker"}}
    assert api.post("/queues/gate/pause").status_code == 204
    body = api.get(f"/jobs/{job_id}/admission").json()
    assert (body["admissible"], body["blocked_by"]) == (False, "queue_paused")
    r = api.get("/jobs/ghost/admission")
    assert (r.status_code, r.json()) == (404, {"error": "no such job"})


def test_oversized_body_is_413(api: Api) -> None:
    big = b64(b"x" * (1024 * 1024))  # a 1 MiB payload fits…
    assert api.post("/jobs", json={"kind": "k", "payload": big}).status_code == 201
    too_big = b64(b"x" * (1024 * 1024 + 1))  # …one byte more is the envelope's 400
    r = api.post("/jobs", json={"kind": "k", "payload": too_big})
    assert (r.status_code, r.json()) == (400, {"error": "payload must be at most 1048576 bytes"})
    r = api.post("/jobs", data=b"{" + b" " * (3 * 1024 * 1024) + b"}",
                 headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()) == (413, {"error": "request body too large"})
