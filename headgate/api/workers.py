"""Workers, the cluster view, and the server→worker signal channel."""

from __future__ import annotations

from typing import Any

import flask

from headgate.core.records import RunningJob, WorkerRecord

from .blueprint import bp, json_response, no_content
from .context import store
from .params import json_body, opt

# The stale-aging rule, defined ONCE: 15 minutes of heartbeat grace. /workers and
# /cluster must agree about who is live, or the cluster view contradicts the list.
WORKER_STALE_MS = 900_000
# "Every worker the registry still remembers": 10 000 years, not a max int, because the
# SQL computes `now - within` and that must not overflow a 64-bit integer.
WORKER_ALL_MS = 315_576_000_000_000


def _ratio(part: int, whole: int) -> float:
    return 0.0 if whole == 0 else part / whole


# Running jobs read per request: more than any fleet's slots in practice.
RUNNING_LIMIT = 1000


def running_json(r: RunningJob, now_ms: int) -> dict[str, Any]:
    lease = r.lease_expires_at_ms
    return {"id": r.id, "kind": r.kind, "queue": r.queue,
            "since_ms": r.attempted_at_ms, "lease_expires_at_ms": lease,
            "orphaned": lease is not None and lease < now_ms}


def worker_json(w: WorkerRecord, running: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "worker_id": w.worker_id,
        "host": w.host,
        "pid": w.pid,
        "queues": list(w.queues),
        "concurrency": w.concurrency,
        "started_at_ms": w.started_at_ms,
        "heartbeat_at_ms": w.heartbeat_at_ms,
        "inflight": w.inflight,
        "polls": w.polls,
        "empty_polls": w.empty_polls,
        "utilization": _ratio(w.inflight, w.concurrency),
        "empty_poll_ratio": _ratio(w.empty_polls, w.polls),
        # Additive: what the worker reports it is doing, and a signal not yet delivered.
        "status": w.status,
        "pending_signal": w.pending_signal,
        # Additive: the jobs it holds leases on now, longest-running first.
        "running": running,
        # Additive: a worker on the worker protocol's agent string and kinds (null for
        # a Python worker).
        "agent": w.agent,
        "kinds": None if w.kinds is None else list(w.kinds),
    }


@bp.get("/workers")
def workers() -> flask.Response:
    """Live workers only: stale ones (15 min without a heartbeat) age out of the view.
    Each lists what it runs now (Sidekiq's Busy page), from the running jobs' leases."""
    s = store()
    live = s.list_workers(WORKER_STALE_MS)
    now = s.now_ms()
    held: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(s.running_jobs(RUNNING_LIMIT), key=lambda r: (r.attempted_at_ms or 0,
                                                                   r.id)):
        held.setdefault(r.worker_id or "", []).append(running_json(r, now))
    return json_response([worker_json(w, held.get(w.worker_id, [])) for w in live])


@bp.get("/cluster")
def cluster() -> flask.Response:
    """The fleet-level answer an operator needs at 3am: which queues have ZERO live
    workers. Every queue the store knows enters at 0 before live workers are counted,
    so a queue with jobs and no consumer is listed with `live_workers: 0` rather than
    silently absent. Utilization and the empty-poll ratio are ratios of sums, so a
    1-slot worker does not weigh as much as a 64-slot one."""
    s = store()
    live = s.list_workers(WORKER_STALE_MS)
    every = s.list_workers(WORKER_ALL_MS)
    capacity = sum(w.concurrency for w in live)
    inflight = sum(w.inflight for w in live)
    polls = sum(w.polls for w in live)
    empty = sum(w.empty_polls for w in live)
    per_queue: dict[str, int] = {q.queue: 0 for q in s.queue_stats()}
    for w in live:
        for queue in w.queues:
            per_queue[queue] = per_queue.get(queue, 0) + 1
    return json_response({
        "workers": {
            "live": len(live),
            "stale": max(0, len(every) - len(live)),
            "total": len(every),
        },
        "capacity_total": capacity,
        "inflight_total": inflight,
        "utilization": _ratio(inflight, capacity),
        "empty_poll_ratio": _ratio(empty, polls),
        "polls_total": polls,
        "empty_polls_total": empty,
        "queues": [{"queue": q, "live_workers": n} for q, n in sorted(per_queue.items())],
    })


@bp.post("/workers/<segment:worker_id>/signal")
def signal_worker(worker_id: str) -> flask.Response:
    """quiet | resume | restart | terminate | resign, delivered on the worker's next
    heartbeat; null clears a pending signal."""
    b = json_body(opt("command", "str"))
    store().signal_worker(worker_id, b["command"])
    return no_content()
