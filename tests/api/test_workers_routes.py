"""/api/v1/workers, /cluster and the signal channel."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from headgate.core.records import HeartbeatReply, WorkerBeat

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

NOW = lambda: int(time.time() * 1000)  # noqa: E731


def beat(api: Api, worker_id: str, queues: list[str], *, concurrency: int = 4,
         inflight: int = 1, polls: int = 10, empty: int = 5) -> HeartbeatReply:
    return api.store.heartbeat(WorkerBeat(worker_id, host="box", pid=42, queues=tuple(queues),
                                          concurrency=concurrency, inflight=inflight, polls=polls,
                                          empty_polls=empty, started_at_ms=NOW() - 1000))


def age_worker(api: Api, worker_id: str, by_ms: int) -> None:
    """Make a worker's last heartbeat `by_ms` old (the registry has no clock to fake)."""
    with api.store.db.write() as (conn, _):  # type: ignore[attr-defined]
        conn.execute(
            "UPDATE workers SET heartbeat_at_ms = heartbeat_at_ms - ? WHERE worker_id = ?",
            (by_ms, worker_id),
        )


def test_workers_lists_live_workers_with_ratios(api: Api) -> None:
    assert api.get("/workers").json() == []
    beat(api, "w1", ["mail"], concurrency=4, inflight=1, polls=10, empty=5)
    beat(api, "w2", ["mail"], concurrency=0, inflight=0, polls=0, empty=0)
    age_worker(api, "w2", 16 * 60_000)  # 15-minute stale rule: hidden from /workers
    [w] = api.get("/workers").json()
    assert w["worker_id"] == "w1" and w["queues"] == ["mail"]
    assert (w["utilization"], w["empty_poll_ratio"]) == (0.25, 0.5)
    assert (w["host"], w["pid"], w["concurrency"], w["inflight"]) == ("box", 42, 4, 1)


def test_cluster(api: Api) -> None:
    """A queue with jobs and no live worker is listed with live_workers 0, not omitted."""
    api.enqueue(queue="orphan-queue")
    beat(api, "w1", ["mail", "reports"], concurrency=64, inflight=32, polls=100, empty=10)
    beat(api, "w2", ["mail"], concurrency=1, inflight=1, polls=100, empty=90)
    beat(api, "old", ["orphan-queue"], concurrency=8, inflight=0)
    age_worker(api, "old", 16 * 60_000)
    body = api.get("/cluster").json()
    assert body["workers"] == {"live": 2, "stale": 1, "total": 3}
    assert (body["capacity_total"], body["inflight_total"]) == (65, 33)
    assert body["utilization"] == 33 / 65  # ratio of sums, not mean of ratios
    assert body["empty_poll_ratio"] == 100 / 200
    assert (body["polls_total"], body["empty_polls_total"]) == (200, 100)
    assert body["queues"] == [
        {"queue": "mail", "live_workers": 2},
        {"queue": "orphan-queue", "live_workers": 0},
        {"queue": "reports", "live_workers": 1},
    ]


def test_cluster_empty(api: Api) -> None:
    assert api.get("/cluster").json() == {
        "workers": {"live": 0, "stale": 0, "total": 0}, "capacity_total": 0,
        "inflight_total": 0, "utilization": 0.0, "empty_poll_ratio": 0.0, "polls_total": 0,
        "empty_polls_total": 0, "queues": [],
    }


def test_signal_worker(api: Api) -> None:
    beat(api, "w1", ["q"])
    r = api.post("/workers/w1/signal", json={"command": "quiet"})
    assert (r.status_code, r.content) == (204, b"")
    assert api.get("/workers").json()[0]["pending_signal"] == "quiet"
    assert beat(api, "w1", ["q"]).signal == "quiet"  # delivered once, on the heartbeat
    api.post("/workers/w1/signal", json={"command": "terminate"})
    assert api.post("/workers/w1/signal", json={"command": None}).status_code == 204
    assert beat(api, "w1", ["q"]).signal is None  # null cleared it
    assert api.post("/workers/w1/signal", json={}).status_code == 204
    r = api.post("/workers/w1/signal", json={"command": "explode"})
    assert (r.status_code, r.json()) == (
        400, {"error": "command must be one of quiet|resume|restart|terminate|resign or null"})
    r = api.post("/workers/ghost/signal", json={"command": "quiet"})
    assert (r.status_code, r.json()) == (404, {"error": "worker not found: ghost"})
    r = api.post("/workers/w1/signal", json={"command": 3})
    assert (r.status_code, r.json()) == (422, {"error": "invalid request body"})
