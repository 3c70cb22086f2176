"""Admission policy: rate classes, concurrency limits, partitions, quarantine."""

from __future__ import annotations

from typing import Any

import flask

from headgate.core.adaptive import HISTORY_SHOWN_MS, Adaptive
from headgate.core.names import check_policy_name
from headgate.core.policy import SATURATION_STRATEGIES
from headgate.core.records import (
    AdaptiveState,
    ConcurrencyLimit,
    QuarantineEntry,
    RateClassState,
)

from .blueprint import bp, empty_ok, json_response, no_content
from .context import store
from .errors import ApiError
from .params import Field, dflt, json_body, opt, query, req


def adaptive_json(a: AdaptiveState) -> dict[str, Any]:
    return {"min": a.min, "max": a.max, "decrease_factor": a.decrease_factor,
            "increase_step": a.increase_step, "configured_limit": a.configured_limit,
            "configured_burst": a.configured_burst, "last_decrease_ms": a.last_decrease_ms,
            "last_increase_ms": a.last_increase_ms,
            "throttles_since_decrease": a.throttles_since_decrease, "summary": a.summary}


def rate_class_json(r: RateClassState) -> dict[str, Any]:
    return {
        "name": r.name,
        "tokens_available": r.tokens_available,
        "burst": r.burst,
        "limit_per_window": r.limit_per_window,
        "window_ms": r.window_ms,
        "jobs_waiting": r.jobs_waiting,
        "paused": r.paused,
        "refill_in_ms": r.refill_in_ms,
        "adaptive": None if r.adaptive is None else adaptive_json(r.adaptive),
    }


@bp.get("/rate-classes")
def rate_classes() -> flask.Response:
    """Each class's settings and tokens, plus `refill_in_ms` (time until one more token)."""
    return json_response([rate_class_json(r) for r in store().rate_classes()])


# An adaptive class's bounds and steps (core/adaptive.py); signed so that a negative
# value is refused by the rule that names it (400), not as a malformed body.
ADAPTIVE_FIELDS = (req("min", "i64"), req("max", "i64"), req("decrease_factor", "number"),
                   req("increase_step", "i64"))


@bp.put("/rate-classes/<segment:name>")
def put_rate_class(name: str) -> flask.Response:
    """`paused: true` is the kill switch: the class admits nothing, fleet-wide.
    `adaptive` makes the limit move between `min` and `max` with the downstream's
    throttles (docs/api.md); PUT again with the same limit keeps what it learned."""
    b = json_body(req("limit", "i64"), req("window_ms", "i64"), opt("burst", "i64"),
                  dflt("paused", "bool", False),
                  Field("adaptive", "object", nullable=True, fields=ADAPTIVE_FIELDS))
    check_policy_name("rate class", name)
    burst = max(b["limit"], 1) if b["burst"] is None else b["burst"]
    a = b["adaptive"]
    adaptive = None if a is None else Adaptive.checked(
        a["min"], a["max"], a["decrease_factor"], a["increase_step"])
    store().upsert_rate_class(name, b["limit"], b["window_ms"], burst, b["paused"],
                              adaptive=adaptive)
    return empty_ok()


@bp.get("/rate-classes/<segment:name>/history")
def rate_class_history(name: str) -> flask.Response:
    """An adaptive class's limit changes, oldest first (`since_ms`: default the last
    hour; `limit`: the newest 1..10000, default 1000)."""
    p = query(opt("since_ms", "i64"), dflt("limit", "u32", 1000))
    if not 1 <= p["limit"] <= 10_000:
        raise ApiError(400, "limit must be 1..10000")
    s = store()
    if not any(r.name == name for r in s.rate_classes()):
        raise ApiError(404, "no such rate class")
    since = s.now_ms() - HISTORY_SHOWN_MS if p["since_ms"] is None else p["since_ms"]
    return json_response([{"at_ms": c.at_ms, "limit_per_window": c.limit_per_window,
                           "window_ms": c.window_ms, "change": c.change,
                           "throttles": c.throttles}
                          for c in s.rate_class_history(name, since, p["limit"])])


@bp.delete("/rate-classes/<segment:name>")
def delete_rate_class(name: str) -> flask.Response:
    """204, 404 for an unknown class, 409 while available jobs wait on it (they would
    run without a budget) unless `force=true`."""
    p = query(dflt("force", "bool", False))
    waiting = store().delete_rate_class(name, p["force"])
    if waiting and not p["force"]:
        raise ApiError(409, f"rate class is in use: {waiting} available jobs name it "
                       "(force=true deletes it anyway; they then run without a budget)",
                       jobs=waiting)
    return no_content()


def concurrency_limit_json(c: ConcurrencyLimit) -> dict[str, Any]:
    return {"name": c.name, "queue": c.queue, "max_concurrent": c.max_concurrent,
            "on_saturated": c.on_saturated}


@bp.get("/concurrency-limits")
def concurrency_limits() -> flask.Response:
    return json_response([concurrency_limit_json(c) for c in store().concurrency_limits()])


@bp.put("/concurrency-limits/<segment:name>")
def put_concurrency_limit(name: str) -> flask.Response:
    b = json_body(req("queue", "str"), req("max_concurrent", "u64"), req("on_saturated", "str"))
    check_policy_name("concurrency limit", name)
    if not b["queue"]:
        raise ApiError(400, "name and queue must not be empty")
    if b["max_concurrent"] == 0:
        raise ApiError(400, "max_concurrent must be >= 1")
    if b["max_concurrent"] > 2**63 - 1:
        raise ApiError(400, f"max_concurrent must be <= {2**63 - 1}")
    if b["on_saturated"] not in SATURATION_STRATEGIES:
        raise ApiError(400, f"on_saturated must be one of {'|'.join(SATURATION_STRATEGIES)}")
    store().upsert_concurrency_limit(name, b["queue"], b["max_concurrent"], b["on_saturated"])
    return empty_ok()


@bp.delete("/concurrency-limits/<segment:name>")
def delete_concurrency_limit(name: str) -> flask.Response:
    """204, 404 for an unknown limit, 409 while jobs of its queue are available or
    running under it unless `force=true`."""
    p = query(dflt("force", "bool", False))
    governed = store().delete_concurrency_limit(name, p["force"])
    if governed and not p["force"]:
        raise ApiError(409, f"concurrency limit is in use: {governed} jobs of its queue are "
                       "available or running (force=true deletes it anyway)", jobs=governed)
    return no_content()


@bp.get("/partitions")
def partitions() -> flask.Response:
    """`{partition_key, deficit, waiting, running}`; at most 200, busiest first (read
    from the partition counters, never from jobs)."""
    p = query(req("queue", "str"))
    return json_response([{"partition_key": r.partition_key, "deficit": r.deficit,
                           "waiting": r.waiting, "running": r.running}
                          for r in store().partitions(p["queue"])])


def quarantine_json(e: QuarantineEntry) -> dict[str, Any]:
    return {"fingerprint": e.fingerprint, "kind": e.kind, "crash_count": e.crash_count,
            "quarantined_at_ms": e.quarantined_at_ms, "reason": e.reason}


@bp.get("/quarantine")
def quarantine() -> flask.Response:
    return json_response([quarantine_json(e) for e in store().quarantine_list()])


@bp.delete("/quarantine/<segment:fingerprint>")
def quarantine_release(fingerprint: str) -> flask.Response:
    released = store().quarantine_release(fingerprint)
    return no_content({"x-released-jobs": str(released)})
