"""/api/v1/queues…: list, weight, delete (incl. force → operation), pause/resume,
history, enqueue limit, memory sampling."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

QUEUE_FIELDS = {
    "queue", "weight", "unfinished_jobs", "max_unfinished_jobs", "by_state", "arrival_rate",
    "drain_rate", "time_to_drain_ms", "oldest_available_ms", "quiet_groups", "paused",
    "memory_bytes", "memory_sampled_at_ms", "count_is_approximate", "drain_trend",
}


def wait_operation(api: Api, op_id: str, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        op = api.get(f"/operations/{op_id}").json()
        if op["status"] in ("done", "failed") or time.monotonic() > deadline:
            return op
        time.sleep(0.05)


def queues(api: Api) -> dict[str, dict]:
    r = api.get("/queues")
    assert r.status_code == 200
    return {q["queue"]: q for q in r.json()}


def test_list_queues(api: Api) -> None:
    assert api.get("/queues").json() == []
    api.enqueue(queue="mail")
    api.enqueue(queue="mail", pending=True)
    q = queues(api)["mail"]
    assert set(q) == QUEUE_FIELDS
    assert q["by_state"]["available"] == 1 and q["by_state"]["pending"] == 1
    assert q["unfinished_jobs"] == 2
    assert (q["weight"], q["paused"], q["max_unfinished_jobs"]) == (1, False, None)
    assert q["count_is_approximate"] is False
    assert q["memory_bytes"] is None  # never sampled
    assert q["oldest_available_ms"] is not None
    assert q["arrival_rate"] > 0
    # No noisy partition: the quiet group is the whole queue, exactly.
    assert q["quiet_groups"] == {
        "arrival_rate": q["arrival_rate"], "drain_rate": q["drain_rate"],
        "time_to_drain_ms": q["time_to_drain_ms"],
        "oldest_available_ms": q["quiet_groups"]["oldest_available_ms"],
        "noisy_partitions": 0, "approximate": False,
    }


def test_quiet_groups_with_a_noisy_partition(api: Api) -> None:
    api.enqueue(queue="t", partition_key="quiet")
    for _ in range(20):
        api.enqueue(queue="t", partition_key="noisy")
    quiet = queues(api)["t"]["quiet_groups"]
    assert quiet["noisy_partitions"] == 1 and quiet["approximate"] is True
    assert quiet["arrival_rate"] is None and quiet["time_to_drain_ms"] is None
    assert quiet["oldest_available_ms"] is not None


def test_put_queue_weight(api: Api) -> None:
    r = api.put("/queues/mail", json={"weight": 5})
    assert (r.status_code, r.content) == (200, b"")
    assert queues(api)["mail"]["weight"] == 5
    r = api.put("/queues/mail", json={"weight": 0})
    assert (r.status_code, r.json()) == (400, {"error": "weight must be >= 1"})
    r = api.put("/queues/mail", json={})
    assert (r.status_code, r.json()) == (422, {"error": "missing field `weight`"})
    r = api.put("/queues/mail", json={"weight": -2})
    assert (r.status_code, r.json()) == (422, {"error": "invalid request body"})
    r = api.put("/queues/" + "q" * 300, json={"weight": 2})
    assert (r.status_code, r.json()) == (400, {"error": "queue must be at most 255 characters"})


def test_pause_resume(api: Api) -> None:
    api.enqueue(queue="p")
    assert api.post("/queues/p/pause").status_code == 204
    assert queues(api)["p"]["paused"] is True
    assert api.store.admit("w", ["p"], 5) == []
    assert api.post("/queues/p/resume").status_code == 204
    assert queues(api)["p"]["paused"] is False
    assert len(api.store.admit("w", ["p"], 5)) == 1


def test_history(api: Api) -> None:
    api.enqueue(queue="h")
    api.enqueue(queue="h")
    buckets = api.get("/queues/h/history").json()
    assert len(buckets) == 1
    assert buckets[0]["arrived"] == 2 and buckets[0]["completed"] == 0
    assert set(buckets[0]) >= {"at_ms", "arrived", "completed", "failed",
                               "admission_rejections"}
    later = int(time.time() * 1000) + 3_600_000
    assert api.get(f"/queues/h/history?since_ms={later}").json() == []
    hourly = api.get("/queues/h/history?bucket_ms=3600000").json()
    assert hourly[0]["at_ms"] % 3_600_000 == 0
    r = api.get("/queues/h/history?bucket_ms=1000")
    assert (r.status_code, r.json()) == (400, {"error": "bucket_ms must be an integer >= 60000"})
    r = api.get("/queues/h/history?since_ms=yesterday")
    assert (r.status_code, r.json()) == (400, {"error": "invalid query parameter `since_ms`"})
    assert api.get("/queues/unknown/history").json() == []


def test_enqueue_limit(api: Api) -> None:
    r = api.put("/queues/lim/enqueue-limit", json={"max_unfinished_jobs": 2})
    assert (r.status_code, r.content) == (200, b"")
    assert queues(api)["lim"]["max_unfinished_jobs"] == 2
    r = api.put("/queues/lim/enqueue-limit", json={"max_unfinished_jobs": -1})
    assert (r.status_code, r.json()) == (422, {"error": "invalid request body"})
    r = api.put("/queues/lim/enqueue-limit", json={"max_unfinished_jobs": 2**64 - 1})
    assert r.status_code == 400
    assert api.delete("/queues/lim/enqueue-limit").status_code == 204
    assert queues(api)["lim"]["max_unfinished_jobs"] is None
    # 0 is the intake kill switch.
    assert api.put("/queues/lim/enqueue-limit", json={"max_unfinished_jobs": 0}).status_code == 200
    r = api.post("/jobs", json={"kind": "k", "payload": "", "queue": "lim"})
    assert r.status_code == 429 and r.json()["limit"] == 0


def test_sample_memory(api: Api) -> None:
    for _ in range(5):
        api.enqueue(queue="m", payload=b"x" * 1000)
    r = api.post("/queues/actions/sample-memory", json={})
    assert (r.status_code, r.json()) == (200, {"sampled_queues": 1})
    q = queues(api)["m"]
    assert q["memory_bytes"] >= 5000 and q["memory_sampled_at_ms"] is not None
    assert api.post("/queues/actions/sample-memory", json={"limit": 10}).json() == {
        "sampled_queues": 1}
    r = api.post("/queues/actions/sample-memory", json={"limit": 0})
    assert (r.status_code, r.json()) == (400, {"error": "limit must be >= 1"})
    r = api.post("/queues/actions/sample-memory")
    assert (r.status_code, r.json()) == (415, {"error": "expected Content-Type: application/json"})


def test_delete_queue(api: Api) -> None:
    r = api.delete("/queues/ghost")
    assert (r.status_code, r.json()) == (404, {"error": "queue not found: ghost"})
    # A queue that exists only by its settings, with no jobs: deleted at once.
    api.put("/queues/empty", json={"weight": 3})
    r = api.delete("/queues/empty")
    assert (r.status_code, r.content) == (204, b"")
    assert "empty" not in queues(api)
    # Non-empty without force: refused, nothing deleted.
    for _ in range(3):
        api.enqueue(queue="full")
    r = api.delete("/queues/full")
    assert r.status_code == 409
    assert r.json() == {"error": "queue full is not empty (3 jobs); delete its jobs first or "
                                 "pass force=true"}
    assert queues(api)["full"]["unfinished_jobs"] == 3
    r = api.delete("/queues/full?force=maybe")
    assert (r.status_code, r.json()) == (400, {"error": "invalid query parameter `force`"})
    # force: an operation deletes the jobs, then the queue.
    r = api.delete("/queues/full?force=true")
    assert r.status_code == 202
    op_id = r.json()["operation_id"]
    assert set(r.json()) == {"operation_id"}
    op = wait_operation(api, op_id)
    assert (op["status"], op["affected"], op["total_estimated"], op["action"]) == (
        "done", 3, 3, "delete_queue")
    assert "full" not in queues(api)
    assert api.get("/jobs/counts?queue=full").json()["counts"]["available"] == 0
    # The name is free again, with fresh settings.
    api.enqueue(queue="full")
    assert queues(api)["full"]["paused"] is False
