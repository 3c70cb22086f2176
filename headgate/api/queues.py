"""Queues: the list with its counters and rates, weight, delete, pause/resume, history,
enqueue limit, the memory sampling action, and wait/run time percentiles by queue and
by kind."""

from __future__ import annotations

from typing import Any

import flask

from headgate.core import drain
from headgate.core.latency import summaries, window_start
from headgate.core.records import HistoryBucket, QueueExtras, QueueStats
from headgate.core.schema_constants import HISTORY_BUCKET_MS

from .blueprint import bp, empty_ok, json_response, no_content
from .context import store
from .errors import ApiError
from .operations import wake_runner
from .params import dflt, json_body, opt, query, req


def queue_json(q: QueueStats, drained: dict[str, Any], extra: QueueExtras) -> dict[str, Any]:
    """The queue body; `drained` is smoothed_drain's (the rates, time to drain and
    trend the console shows too).

    Honest values where the Python store has no such measurement (decisions):
    - `count_is_approximate`: false — counts come from exact maintained counters.
    - `memory_bytes`: the last POST /queues/actions/sample-memory estimate for the
      queue, or null when it was never sampled (`memory_sampled_at_ms` says when).
    - `quiet_groups`: the queue without its noisy partition (one holding more than half
      of the available jobs while others wait). With no noisy partition it IS the
      queue, so its figures are the queue's and `approximate` is false. With one, the
      oldest available job outside it is found among the queue's oldest 2000; per-
      partition rates are not kept, so rates and time-to-drain are null and
      `approximate` is true.
    """
    if extra.noisy_partitions:
        quiet = {
            "arrival_rate": None,
            "drain_rate": None,
            "time_to_drain_ms": None,
            "oldest_available_ms": extra.quiet_oldest_available_ms,
            "noisy_partitions": extra.noisy_partitions,
            "approximate": True,
        }
    else:
        quiet = {
            "arrival_rate": drained["arrival_rate"],
            "drain_rate": drained["drain_rate"],
            "time_to_drain_ms": drained["time_to_drain_ms"],
            "oldest_available_ms": q.oldest_available_ms,
            "noisy_partitions": 0,
            "approximate": False,
        }
    return {
        "queue": q.queue,
        "weight": q.weight,
        "unfinished_jobs": q.unfinished_jobs,
        "max_unfinished_jobs": q.max_unfinished_jobs,
        "by_state": dict(q.by_state),
        "arrival_rate": drained["arrival_rate"],
        "drain_rate": drained["drain_rate"],
        "time_to_drain_ms": drained["time_to_drain_ms"],
        "oldest_available_ms": q.oldest_available_ms,
        "drain_trend": drained["drain_trend"],
        "quiet_groups": quiet,
        "paused": q.paused,
        "memory_bytes": extra.memory_bytes,
        "memory_sampled_at_ms": extra.memory_sampled_at_ms,
        "count_is_approximate": False,
    }


def smoothed_drain(q: QueueStats, buckets: dict[int, tuple[int, ...]],
                   now: int) -> dict[str, Any]:
    """The queue's rates, time to drain and trend as the console computes them
    (headgate.core.drain over its per-minute history), so both say the same thing.

    The field's meaning holds where it is defined: 0 when nothing is left
    to drain but pending jobs, null when there is no finite forecast. A queue whose only
    other work is scheduled is "empty" to the console (nothing due now) but not empty
    here: null, since work not yet due has no drain time."""
    f = drain.queue_forecast(q.by_state, q.paused, buckets, now)
    due = q.unfinished_jobs - int(q.by_state.get("pending", 0) or 0)
    ttd = 0 if due <= 0 else (None if f.trend == "empty" else f.ttd_ms)
    return {"arrival_rate": round(f.arrival, 6), "drain_rate": round(f.drain, 6),
            "time_to_drain_ms": ttd, "drain_trend": f.trend}


@bp.get("/queues")
def list_queues() -> flask.Response:
    """Three reads for any number of queues: the stats, the extras, and every queue's
    last WINDOW_MS of per-minute counters (one range scan of queue_history's bucket
    index) for the smoothed rates."""
    s = store()
    stats = s.queue_stats()
    extras = s.queue_extras()
    now = s.now_ms()
    counters = s.history_counters(now - drain.WINDOW_MS - drain.BUCKET_MS)
    return json_response([
        queue_json(q, smoothed_drain(q, counters.get(q.queue, {}), now),
                   extras.get(q.queue) or QueueExtras())
        for q in stats])


@bp.put("/queues/<segment:queue>")
def put_queue(queue: str) -> flask.Response:
    b = json_body(req("weight", "u32"))
    if b["weight"] == 0:
        raise ApiError(400, "weight must be >= 1")
    store().set_queue_weight(queue, b["weight"])
    return empty_ok()


@bp.delete("/queues/<segment:queue>")
def delete_queue(queue: str) -> flask.Response:
    """Empty queue: 204. Non-empty without `force`: 409 naming the job count (nothing
    is deleted by surprise). `force=true`: 202 with the operation deleting its jobs
    (the queue is paused and its intake closed meanwhile), then the queue."""
    p = query(dflt("force", "bool", False))
    op_id = store().delete_queue(queue, p["force"])
    if op_id is None:
        return no_content()
    wake_runner()
    return json_response({"operation_id": op_id}, 202)


@bp.post("/queues/actions/sample-memory")
def sample_queue_memory() -> flask.Response:
    b = json_body(opt("limit", "u32"))
    limit = 100 if b["limit"] is None else b["limit"]
    sampled = store().sample_queue_memory(limit)
    return json_response({"sampled_queues": sampled})


@bp.post("/queues/<segment:queue>/pause")
def pause_queue(queue: str) -> flask.Response:
    store().set_queue_paused(queue, True)
    return no_content()


@bp.post("/queues/<segment:queue>/resume")
def resume_queue(queue: str) -> flask.Response:
    store().set_queue_paused(queue, False)
    return no_content()


def history_json(b: HistoryBucket) -> dict[str, Any]:
    r = b.admission_rejections
    return {"at_ms": b.at_ms, "arrived": b.arrived, "completed": b.completed,
            "failed": b.failed, "depth": b.depth,
            "admission_rejections": {"rate_class": r.rate_class,
                                     "concurrency_limit": r.concurrency_limit,
                                     "quarantine": r.quarantine}}


@bp.get("/queues/<segment:queue>/history")
def history(queue: str) -> flask.Response:
    """`{at_ms, arrived, completed}` buckets, plus failed, depth and admission
    rejections by policy (kept by the history duty from counters)."""
    p = query(opt("since_ms", "i64"), opt("bucket_ms", "i64"))
    since = 0 if p["since_ms"] is None else p["since_ms"]
    bucket = HISTORY_BUCKET_MS if p["bucket_ms"] is None else p["bucket_ms"]
    return json_response([history_json(b) for b in store().history(queue, since, bucket)])


@bp.put("/queues/<segment:queue>/enqueue-limit")
def put_enqueue_limit(queue: str) -> flask.Response:
    b = json_body(req("max_unfinished_jobs", "u64"))
    if b["max_unfinished_jobs"] > 2**63 - 1:
        raise ApiError(400, f"max_unfinished_jobs must be <= {2**63 - 1}")
    store().set_enqueue_limit(queue, b["max_unfinished_jobs"])
    return empty_ok()


@bp.delete("/queues/<segment:queue>/enqueue-limit")
def delete_enqueue_limit(queue: str) -> flask.Response:
    store().set_enqueue_limit(queue, None)
    return no_content()


# Percentile windows: the last hour by default, at most a day (the console's longest
# chart; retention keeps at least that much).
LATENCY_WINDOW_MS = 3_600_000
LATENCY_WINDOW_MAX_MS = 86_400_000


def _latency(by: str, queue: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """Wait and run time percentiles over the window from the store's latency
    histograms (those /metrics exports), in all and per `by`."""
    p = query(opt("window_ms", "i64"))
    window = LATENCY_WINDOW_MS if p["window_ms"] is None else p["window_ms"]
    if not HISTORY_BUCKET_MS <= window <= LATENCY_WINDOW_MAX_MS:
        raise ApiError(400, f"window_ms must be between {HISTORY_BUCKET_MS} and "
                            f"{LATENCY_WINDOW_MAX_MS}")
    s = store()
    since = window_start(s.now_ms(), window, HISTORY_BUCKET_MS)
    totals, parts = summaries(s.latency_totals(since, queue=queue, kind=kind), by)
    return {"window_ms": window, "since_ms": since, **totals, f"{by}s": parts}


@bp.get("/queues/<segment:queue>/latency")
def queue_latency(queue: str) -> flask.Response:
    return json_response({"queue": queue, **_latency("kind", queue=queue)})


@bp.get("/kinds/<segment:kind>/latency")
def kind_latency(kind: str) -> flask.Response:
    return json_response({"kind": kind, **_latency("queue", kind=kind)})
