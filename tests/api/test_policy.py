"""/api/v1 admission policy: rate classes, concurrency limits, partitions, quarantine."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures


def test_rate_classes(api: Api) -> None:
    assert api.get("/rate-classes").json() == []
    r = api.put("/rate-classes/smtp", json={"limit": 5, "window_ms": 1000})
    assert (r.status_code, r.content) == (200, b"")
    api.enqueue(rate_class="smtp")
    [rc] = api.get("/rate-classes").json()
    assert {k: rc[k] for k in ("name", "burst", "limit_per_window", "window_ms",
                               "jobs_waiting", "paused")} == {
        "name": "smtp", "burst": 5, "limit_per_window": 5, "window_ms": 1000,
        "jobs_waiting": 1, "paused": False}
    assert rc["tokens_available"] == 5
    # burst defaults to max(limit, 1); explicit burst and the kill switch.
    api.put("/rate-classes/smtp", json={"limit": 2, "window_ms": 500, "burst": 9,
                                        "paused": True})
    [rc] = api.get("/rate-classes").json()
    assert (rc["burst"], rc["limit_per_window"], rc["paused"]) == (9, 2, True)
    assert api.store.admit("w", ["default"], 5) == []  # paused class admits nothing


def test_rate_class_rejections(api: Api) -> None:
    for body, status, error in (
        ({"limit": 0, "window_ms": 1000}, 400, "limit must be >= 1"),
        ({"limit": 5, "window_ms": 0}, 400, "window_ms must be >= 1"),
        ({"limit": 5, "window_ms": 1000, "burst": 0}, 400, "burst must be >= 1"),
        ({"window_ms": 1000}, 422, "missing field `limit`"),
        ({"limit": 5}, 422, "missing field `window_ms`"),
        ({"limit": "5", "window_ms": 1000}, 422, "invalid request body"),
        ({"limit": 5, "window_ms": 1000, "paused": None}, 422, "invalid request body"),
    ):
        r = api.put("/rate-classes/x", json=body)
        assert (r.status_code, r.json()) == (status, {"error": error}), body
    assert api.get("/rate-classes").json() == []


def test_concurrency_limits(api: Api) -> None:
    assert api.get("/concurrency-limits").json() == []
    r = api.put("/concurrency-limits/one-per-tenant",
                json={"queue": "q", "max_concurrent": 1, "on_saturated": "queue"})
    assert (r.status_code, r.content) == (200, b"")
    assert api.get("/concurrency-limits").json() == [
        {"name": "one-per-tenant", "queue": "q", "max_concurrent": 1, "on_saturated": "queue"}]
    for body, status, error in (
        ({"queue": "", "max_concurrent": 1, "on_saturated": "queue"}, 400,
         "name and queue must not be empty"),
        ({"queue": "q", "max_concurrent": 0, "on_saturated": "queue"}, 400,
         "max_concurrent must be >= 1"),
        ({"queue": "q", "max_concurrent": 1, "on_saturated": "explode"}, 400,
         "on_saturated must be one of queue|discard|cancel_incoming|cancel_running"),
        ({"queue": "q", "max_concurrent": 1}, 422, "missing field `on_saturated`"),
        ({"queue": "q", "max_concurrent": -1, "on_saturated": "queue"}, 422,
         "invalid request body"),
    ):
        r = api.put("/concurrency-limits/bad", json=body)
        assert (r.status_code, r.json()) == (status, {"error": error}), body
    assert len(api.get("/concurrency-limits").json()) == 1


def test_partitions(api: Api) -> None:
    for _ in range(3):
        api.enqueue(queue="t", partition_key="acme")
    api.enqueue(queue="t", partition_key="globex")
    parts = api.get("/partitions?queue=t").json()
    assert [(p["partition_key"], p["waiting"]) for p in parts] == [("acme", 3), ("globex", 1)]
    assert all("deficit" in p for p in parts)
    assert api.get("/partitions?queue=none").json() == []
    r = api.get("/partitions")
    assert (r.status_code, r.json()) == (400, {"error": "missing query parameter `queue`"})


def test_quarantine_list_and_release(api: Api, quarantine) -> None:
    assert api.get("/quarantine").json() == []
    fp = quarantine(api.store, "crashy", b"boom")
    [entry] = api.get("/quarantine").json()
    assert (entry["fingerprint"], entry["kind"], entry["crash_count"]) == (fp, "crashy", 3)
    assert set(entry) == {"fingerprint", "kind", "crash_count", "quarantined_at_ms", "reason"}
    r = api.delete(f"/quarantine/{fp}")
    assert (r.status_code, r.content, r.headers["x-released-jobs"]) == (204, b"", "1")
    assert api.get("/quarantine").json() == []
    r = api.post("/jobs", json={"kind": "crashy", "payload": base64.b64encode(b"boom").decode()})
    assert r.status_code == 201  # no longer refused
    r = api.delete(f"/quarantine/{fp}")
    assert (r.status_code, r.json()) == (
        404, {"error": f"quarantined fingerprint not found: {fp}"})
