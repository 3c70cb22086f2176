"""/api/v1 meta, system info and prune; /metrics; the OpenAPI document's truth."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import prometheus_client
from openapi_spec_validator import validate

import headgate
from headgate import Outcome

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures


def test_meta(api: Api) -> None:
    body = api.get("/meta").json()
    assert body == {
        "version": headgate.__version__,
        "backend": api.store.backend,
        "capabilities": list(api.store.capabilities().names),
        "limits": {"max_page_size": 200, "approximate_count_threshold": 50000},
        "read_only": False,
    }


def test_system_info(api: Api) -> None:
    api.enqueue()
    api.enqueue(pending=True)
    body = api.get("/system/info").json()
    assert (body["version"], body["backend"]) == (headgate.__version__, api.store.backend)
    assert body["uptime_secs"] >= 0 and body["started_at_ms"] > 0
    assert body["schema_version"] >= 3
    assert body["jobs"]["total"] == 2 and body["jobs"]["active"] == 2
    assert body["jobs"]["by_state"]["pending"] == 1
    if api.store.backend == "sqlite":
        assert body["storage"]["size_bytes"] > 0


def test_prune(api: Api) -> None:
    api.enqueue(queue="p", retention_ms=3_600_000)
    claim = api.store.admit("w", ["p"], 1)[0]
    api.store.ack(claim, Outcome.SUCCESS)
    dry = api.post("/system/prune", json={"older_than_ms": 0, "dry_run": True})
    assert dry.status_code == 200
    assert (dry.json()["dry_run"], dry.json()["total"], dry.json()["deleted"]) == (True, 1, 0)
    assert dry.json()["counts"]["completed"] == 1
    keep = api.post("/system/prune", json={"older_than_ms": 3_600_000}).json()
    assert (keep["total"], keep["deleted"]) == (0, 0)
    done = api.post("/system/prune", json={"older_than_ms": 0}).json()
    assert (done["dry_run"], done["deleted"]) == (False, 1)
    assert api.get("/jobs/counts?queue=p").json()["counts"]["completed"] == 0
    r = api.post("/system/prune", json={"older_than_ms": -1})
    assert (r.status_code, r.json()) == (400, {"error": "older_than_ms must be >= 0"})
    r = api.post("/system/prune", json={})
    assert (r.status_code, r.json()) == (422, {"error": "missing field `older_than_ms`"})


def test_metrics(api: Api) -> None:
    api.enqueue(queue="m")
    api.enqueue(queue="m")
    claim = api.store.admit("w", ["m"], 1)[0]
    api.store.ack(claim, Outcome.SUCCESS)
    api.get("/jobs")
    r = api.get("/metrics")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    text = r.text
    assert 'headgate_jobs{queue="m",state="available"} 1.0' in text
    assert 'headgate_jobs{queue="m",state="completed"} 1.0' in text
    assert 'headgate_jobs_arrived_total{queue="m"} 2.0' in text
    assert 'headgate_jobs_completed_total{queue="m"} 1.0' in text
    assert 'headgate_admission_rejections_total{policy="rate_class",queue="m"} 0.0' in text
    assert re.search(r'headgate_http_request_duration_seconds_count\{endpoint="api.list_jobs",'
                     r'method="GET",status="200"\} 1.0', text)
    # Counters never go backwards across scrapes.
    again = api.get("/metrics").text
    assert 'headgate_jobs_arrived_total{queue="m"} 2.0' in again


def test_metrics_content_type_is_prometheus_clients_own(api: Api) -> None:
    # Scrapers pick the parser by this header; Flask used to append a second charset.
    r = api.get("/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == prometheus_client.CONTENT_TYPE_LATEST


# -- OpenAPI --------------------------------------------------------------------------

def flask_rules(app) -> set[tuple[str, str]]:
    out = set()
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/"):
            continue
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule.removeprefix("/api/v1"))
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            out.add((method.lower(), path))
    return out


def test_openapi_is_valid_and_covers_every_route(api: Api) -> None:
    r = api.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    validate(doc)  # OpenAPI 3.1, raises on any error
    assert doc["openapi"].startswith("3.1")
    documented = {(m, p) for p, item in doc["paths"].items() for m in item}
    assert documented == flask_rules(api.app)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            names = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert names == set(re.findall(r"{(\w+)}", path)), (method, path)
            keyed = any(p["name"] == "Idempotency-Key" for p in op.get("parameters", []))
            # POST /simulate is a read (blueprint.READ_POSTS): it takes no key.
            assert keyed == (method in ("post", "put", "delete")
                             and op["operationId"] != "simulate"), (method, path)
            assert op["operationId"]


def test_openapi_needs_no_store(servers) -> None:
    """Served from memory (and listed among the endpoints that skip the store open)."""
    api = servers.start()
    assert api.get("/openapi.json").json()["info"]["title"] == "headgate control API"
