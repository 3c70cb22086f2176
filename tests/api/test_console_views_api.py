"""The API behind the console's operator views, over real HTTP on both engines: wait
and run time percentiles by queue and kind, the jobs each worker runs now, the
`payload:` search and the enqueued/finished time ranges, and their refusals."""

from __future__ import annotations

import base64
import json
import time
from typing import TYPE_CHECKING

from headgate.core import AckRequest, Outcome
from headgate.core.records import WorkerBeat

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures


def enqueue_json(api: Api, doc: dict, **fields: object) -> str:
    return api.enqueue(payload=json.dumps(doc).encode(), **fields)


def run_all(api: Api, queues: list[str], worker: str = "w") -> None:
    claims = api.store.admit(worker, queues, capacity=100, lease_ms=60_000)
    api.store.ack_many([AckRequest(c, Outcome.SUCCESS) for c in claims])


def test_queue_latency_reports_percentiles_in_all_and_per_kind(api: Api) -> None:
    for kind in ("mail.send", "mail.send", "sms.send"):
        api.enqueue(kind=kind, queue="out")
    api.enqueue(kind="mail.send", queue="elsewhere")
    run_all(api, ["out", "elsewhere"])

    body = api.get("/queues/out/latency").json()
    assert body["queue"] == "out" and body["window_ms"] == 3_600_000
    assert body["since_ms"] % 60_000 == 0
    assert body["since_ms"] <= int(time.time() * 1000) - 3_600_000
    assert body["wait"]["count"] == 3 and body["run"]["count"] == 3
    for metric in ("wait", "run"):
        s = body[metric]
        assert 0 <= s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"] and s["mean_ms"] is not None
    assert [(k["kind"], k["run"]["count"]) for k in body["kinds"]] == [
        ("mail.send", 2), ("sms.send", 1)]

    kind = api.get("/kinds/mail.send/latency", params={"window_ms": 60_000}).json()
    assert kind["kind"] == "mail.send" and kind["window_ms"] == 60_000
    assert [(q["queue"], q["wait"]["count"]) for q in kind["queues"]] == [
        ("elsewhere", 1), ("out", 2)]

    empty = api.get("/queues/nothing-here/latency").json()
    assert empty["kinds"] == [] and empty["run"] == {
        "count": 0, "mean_ms": None, "p50_ms": None, "p95_ms": None, "p99_ms": None}


def test_a_latency_window_out_of_range_or_unparsable_is_400(api: Api) -> None:
    for window in ("59999", "86400001", "-1", "1h", "", "1.5"):
        for path in ("/queues/q/latency", "/kinds/k/latency"):
            r = api.get(path, params={"window_ms": window})
            assert r.status_code == 400
            assert set(r.json()) == {"error"} and "window_ms" in r.json()["error"]


def test_workers_list_what_each_runs_now(api: Api) -> None:
    first = api.enqueue(kind="report.build", queue="work")
    second = api.enqueue(kind="mail.send", queue="work")
    for worker in ("w1", "w2"):
        api.store.heartbeat(WorkerBeat(worker, host="box", pid=1, queues=("work",), concurrency=2,
                                       inflight=1, polls=1, empty_polls=0,
                                       started_at_ms=int(time.time() * 1000)))
    (a,) = api.store.admit("w1", ["work"], capacity=1, lease_ms=60_000)
    (b,) = api.store.admit("w2", ["work"], capacity=1, lease_ms=60_000)
    assert {a.job.id, b.job.id} == {first, second}

    workers = {w["worker_id"]: w for w in api.get("/workers").json()}
    [running] = workers["w1"]["running"]
    assert running == {"id": a.job.id, "kind": a.job.kind, "queue": "work",
                       "since_ms": running["since_ms"],
                       "lease_expires_at_ms": a.lease_expires_at_ms, "orphaned": False}
    assert running["since_ms"] is not None
    assert [r["id"] for r in workers["w2"]["running"]] == [b.job.id]

    api.store.ack(a, Outcome.SUCCESS)
    workers = {w["worker_id"]: w for w in api.get("/workers").json()}
    assert workers["w1"]["running"] == []


def test_payload_search_over_http(api: Api) -> None:
    alice = enqueue_json(api, {"to": "alice@example.com", "n": 1})
    bob = enqueue_json(api, {"to": "bob@example.com", "n": 2})

    def ids(q: str, **params: object) -> list[str]:
        body = api.get("/jobs", params={"q": q, **params}).json()
        assert body["scan_limited"] is False
        return [j["id"] for j in body["jobs"]]

    assert ids("payload:Example.com") == [bob, alice]
    assert ids("payload.to:alice@example.com") == [alice]
    assert ids("payload.n:2") == [bob]
    assert ids("payload:nobody") == []
    # include_payload still works alongside.
    [job] = api.get("/jobs", params={"q": "payload.n:1", "include_payload": "true"}
                    ).json()["jobs"]
    assert json.loads(base64.b64decode(job["payload"]))["to"] == "alice@example.com"
    assert api.get("/jobs").json()["scan_limited"] is False


def test_a_bad_payload_term_is_400(api: Api) -> None:
    for q in ("payload:", "payload.to:", "payload..x:y", "payloads:x"):
        r = api.get("/jobs", params={"q": q})
        assert r.status_code == 400 and set(r.json()) == {"error"}


def test_time_ranges_over_http(api: Api) -> None:
    first = api.enqueue(queue="t")
    second = api.enqueue(queue="t")
    at = {j["id"]: j["enqueued_at_ms"] for j in api.get("/jobs").json()["jobs"]}

    def ids(**params: object) -> set[str]:
        return {j["id"] for j in api.get("/jobs", params=params).json()["jobs"]}

    assert ids(enqueued_after_ms=at[first], enqueued_before_ms=at[second] + 1) == {
        first, second}
    assert ids(enqueued_before_ms=at[first]) == set()
    assert ids(enqueued_after_ms=at[second] + 1) == set()
    assert ids(finished_after_ms=0) == set()
    run_all(api, ["t"])
    done = {j["id"]: j["finalized_at_ms"] for j in api.get("/jobs").json()["jobs"]}
    latest = max(done.values())
    assert ids(finished_after_ms=0) == {first, second}
    assert ids(finished_after_ms=latest + 1) == set()
    assert ids(finished_before_ms=latest + 1, state="completed") == {first, second}


def test_an_unparsable_time_bound_is_400(api: Api) -> None:
    for name in ("enqueued_after_ms", "enqueued_before_ms", "finished_after_ms",
                 "finished_before_ms"):
        for value in ("yesterday", "2024-01-01T00:00:00Z", "1.5", "", "99999999999999999999"):
            r = api.get("/jobs", params={name: value})
            assert r.status_code == 400
            assert r.json() == {"error": f"invalid query parameter `{name}`"}
