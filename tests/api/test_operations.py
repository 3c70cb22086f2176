"""/api/v1/jobs/bulk and /operations/{id}: dry-run counts, then real execution in
bounded batches with progress visible until done."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from headgate import Envelope

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures


def fill(api: Api, n: int, **fields) -> None:
    api.store.enqueue_many([Envelope(kind="bulk.job", **fields) for _ in range(n)])


def test_dry_run_then_execute_with_progress(make_api) -> None:
    api = make_api(background=False)  # drive the batches by hand to watch progress
    fill(api, 1200, queue="bulkq", partition_key="acme")
    fill(api, 10, queue="bulkq", partition_key="other")
    selector = {"queue": "bulkq", "partition_key": "acme"}
    r = api.post("/jobs/bulk", json={"action": "cancel", "selector": selector, "dry_run": True})
    assert r.status_code == 202
    dry = r.json()
    assert {k: dry[k] for k in ("status", "affected", "total_estimated", "dry_run", "error")} == {
        "status": "done", "affected": 0, "total_estimated": 1200, "dry_run": True, "error": None}
    assert api.get("/jobs/counts?queue=bulkq").json()["counts"]["cancelled"] == 0
    assert api.get(f"/operations/{dry['id']}").json() == dry

    op = api.post("/jobs/bulk", json={"action": "cancel", "selector": selector}).json()
    assert (op["status"], op["affected"], op["total_estimated"], op["dry_run"]) == (
        "queued", 0, 1200, False)
    seen = []
    while True:
        api.store.run_operations_batch(500)
        now = api.get(f"/operations/{op['id']}").json()
        seen.append((now["status"], now["affected"]))
        if now["status"] == "done":
            break
    assert seen == [("running", 500), ("running", 1000), ("done", 1200)]
    counts = api.get("/jobs/counts?queue=bulkq").json()["counts"]
    assert (counts["cancelled"], counts["available"]) == (1200, 10)


def test_background_runner_finishes_operations(api: Api) -> None:
    fill(api, 700, queue="bg")
    op = api.post("/jobs/bulk", json={"action": "delete", "selector": {"queue": "bg"}}).json()
    deadline = time.monotonic() + 20
    while (now := api.get(f"/operations/{op['id']}").json())["status"] != "done":
        assert time.monotonic() < deadline, now
        time.sleep(0.05)
    assert now["affected"] == 700
    assert api.get("/jobs/counts?queue=bg").json()["counts"]["available"] == 0


def test_retry_applies_only_where_the_transition_table_allows(api: Api) -> None:
    fill(api, 3, queue="r")
    ids = [j["id"] for j in api.get("/jobs?queue=r").json()["jobs"]]
    api.post("/jobs/actions", json={"action": "cancel", "ids": ids[:2]})
    dry = api.post("/jobs/bulk", json={"action": "retry", "selector": {"queue": "r"},
                                       "dry_run": True}).json()
    assert dry["total_estimated"] == 2  # only the cancelled ones can be retried
    op = api.post("/jobs/bulk", json={"action": "retry", "selector": {"queue": "r"}}).json()
    deadline = time.monotonic() + 20
    while (now := api.get(f"/operations/{op['id']}").json())["status"] != "done":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert now["affected"] == 2
    assert api.get("/jobs/counts?queue=r").json()["counts"]["available"] == 3


def test_older_than_and_state_selectors(api: Api) -> None:
    fill(api, 2, queue="o")
    dry = api.post("/jobs/bulk", json={"action": "delete", "dry_run": True, "selector": {
        "state": "available", "older_than_ms": 3_600_000}}).json()
    assert dry["total_estimated"] == 0  # nothing is an hour old
    dry = api.post("/jobs/bulk", json={"action": "delete", "dry_run": True, "selector": {
        "kind": "bulk.job", "older_than_ms": 0}}).json()
    assert dry["total_estimated"] == 2 and dry["total_capped"] is False


def test_bulk_rejections(api: Api) -> None:
    for body, status, error in (
        ({"action": "archive", "selector": {"queue": "q"}}, 400,
         "operator_archive is not in the transition table"),
        ({"action": "explode", "selector": {"queue": "q"}}, 400, "unknown action `explode`"),
        ({"action": "delete", "selector": {}}, 400,
         "selector must name at least one of queue, state, kind, partition_key, older_than_ms"),
        ({"action": "delete", "selector": {"queue": None}}, 400,
         "selector must name at least one of queue, state, kind, partition_key, older_than_ms"),
        ({"action": "delete", "selector": {"state": "gone"}}, 400, "unknown state `gone`"),
        ({"action": "delete", "selector": {"older_than_ms": -1}}, 400,
         "selector.older_than_ms must be >= 0"),
        ({"action": "delete"}, 422, "missing field `selector`"),
        ({"selector": {"queue": "q"}}, 422, "missing field `action`"),
        ({"action": "delete", "selector": "all"}, 422, "invalid request body"),
        ({"action": "delete", "selector": {"queue": 1}}, 422, "invalid request body"),
    ):
        r = api.post("/jobs/bulk", json=body)
        assert (r.status_code, r.json()) == (status, {"error": error}), body
    r = api.get("/operations/nope")
    assert (r.status_code, r.json()) == (404, {"error": "no such operation"})


def test_bulk_replay_returns_the_same_operation(api: Api) -> None:
    body = {"action": "cancel", "selector": {"queue": "x"}, "dry_run": True}
    a = api.post("/jobs/bulk", json=body, key="bulk-1")
    b = api.post("/jobs/bulk", json=body, key="bulk-1")
    assert a.json()["id"] == b.json()["id"] and b.headers["Idempotent-Replayed"] == "true"
