"""DELETE /api/v1/rate-classes/{name} and /concurrency-limits/{name}, and the one naming
rule (headgate.core.names) PUT applies to both, on both backends."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

LIMIT = {"queue": "reports", "max_concurrent": 2, "on_saturated": "queue"}


def test_delete_a_rate_class(api: Api) -> None:
    assert api.put("/rate-classes/smtp", json={"limit": 5, "window_ms": 1000}).status_code == 200
    r = api.delete("/rate-classes/smtp")
    assert (r.status_code, r.content) == (204, b"")
    assert api.get("/rate-classes").json() == []
    r = api.delete("/rate-classes/smtp")
    assert r.status_code == 404 and "smtp" in r.json()["error"]


def test_a_rate_class_jobs_wait_on_is_kept_unless_forced(api: Api) -> None:
    api.put("/rate-classes/smtp", json={"limit": 5, "window_ms": 1000, "paused": True})
    api.enqueue(rate_class="smtp")
    api.enqueue(rate_class="smtp")
    r = api.delete("/rate-classes/smtp")
    assert r.status_code == 409
    assert r.json()["jobs"] == 2 and "in use" in r.json()["error"]
    assert [rc["name"] for rc in api.get("/rate-classes").json()] == ["smtp"]
    assert api.delete("/rate-classes/smtp?force=true").status_code == 204
    assert api.get("/rate-classes").json() == []
    # The jobs that named it now run without a budget (the paused class held them).
    assert len(api.store.admit("w", ["default"], 5)) == 2


def test_delete_a_concurrency_limit(api: Api) -> None:
    assert api.put("/concurrency-limits/per-tenant", json=LIMIT).status_code == 200
    assert api.delete("/concurrency-limits/per-tenant").status_code == 204
    assert api.get("/concurrency-limits").json() == []
    assert api.delete("/concurrency-limits/per-tenant").status_code == 404


def test_a_limit_over_waiting_jobs_is_kept_unless_forced(api: Api) -> None:
    api.put("/concurrency-limits/per-tenant", json=LIMIT)
    api.enqueue(queue="reports")
    r = api.delete("/concurrency-limits/per-tenant")
    assert (r.status_code, r.json()["jobs"]) == (409, 1)
    assert [c["name"] for c in api.get("/concurrency-limits").json()] == ["per-tenant"]
    assert api.delete("/concurrency-limits/per-tenant?force=true").status_code == 204
    assert api.get("/concurrency-limits").json() == []


def test_delete_needs_an_idempotency_key_and_a_valid_force(api: Api) -> None:
    api.put("/rate-classes/smtp", json={"limit": 5, "window_ms": 1000})
    assert api.delete("/rate-classes/smtp", key=False).status_code == 400
    r = api.delete("/rate-classes/smtp?force=maybe")
    assert (r.status_code, r.json()) == (400, {"error": "invalid query parameter `force`"})


def test_one_naming_rule_for_both(api: Api) -> None:
    for bad in ("bad%20name%21", "%3Cb%3E", "-leading", "a" * 129):
        r = api.put(f"/rate-classes/{bad}", json={"limit": 5, "window_ms": 1000})
        assert r.status_code == 400 and "name is not allowed" in r.json()["error"], bad
        r = api.put(f"/concurrency-limits/{bad}", json=LIMIT)
        assert r.status_code == 400 and "name is not allowed" in r.json()["error"], bad
    assert api.get("/rate-classes").json() == []
    assert api.get("/concurrency-limits").json() == []
    for good in ("smtp", "tier%2Fgold", "eu-west.mail:v2", "a" * 128):
        assert api.put(f"/rate-classes/{good}",
                       json={"limit": 5, "window_ms": 1000}).status_code == 200, good


def test_a_name_stored_before_the_rule_can_still_be_deleted(api: Api) -> None:
    api.store.upsert_rate_class("old name!", 5, 1000)
    assert api.delete("/rate-classes/old%20name%21").status_code == 204
