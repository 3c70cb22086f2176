"""Periodic schedules: list, upsert (validated here: the schedule grammar incl. CRON_TZ),
delete, enqueue events, and run-now. Storage belongs to the store, firing to
headgate.services.scheduling; this module is the HTTP surface."""

from __future__ import annotations

import hashlib
from typing import Any

import flask

from headgate.core import EnqueueForbidden, Envelope, schedule_spec
from headgate.core.policy import ON_MISSED
from headgate.core.records import Schedule, ScheduleEventEntry
from headgate.services.scheduling import run_schedule_now

from .blueprint import bp, empty_ok, json_response, no_content
from .context import (
    api_state,
    caller,
    enqueue_context,
    idempotency_key,
    producer,
    producer_call,
    store,
)
from .errors import ApiError
from .jobs import b64decode, b64encode
from .params import dflt, json_body, opt, query, req


def schedule_json(s: Schedule, include_payload: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": s.id,
        "kind": s.kind,
        "queue": s.queue,
        "spec": s.spec,
        "next_run_ms": s.next_run_ms,
        "last_enqueued_ms": s.last_enqueued_ms,
        "on_missed": s.on_missed,
        "backfill_limit": s.backfill_limit,
        "paused": s.paused,
        "partition_key": s.partition_key,
        "rate_class": s.rate_class,
        "priority": s.priority,
        "max_attempts": s.max_attempts,
        "retention_ms": s.retention_ms,
    }
    if include_payload:
        # Additive, like jobs: hidden unless asked for (an edit form needs it).
        body["payload"] = b64encode(s.payload)
    return body


def event_json(e: ScheduleEventEntry) -> dict[str, Any]:
    return {"event_id": e.event_id, "schedule_id": e.schedule_id, "tick_ms": e.tick_ms,
            "job_id": e.job_id, "outcome": e.outcome, "reason": e.reason,
            "recorded_at_ms": e.recorded_at_ms}


@bp.get("/periodic")
def list_periodic() -> flask.Response:
    p = query(dflt("include_payload", "bool", False))
    return json_response([schedule_json(s, p["include_payload"]) for s in store().list_schedules()])


PERIODIC_FIELDS = (
    req("kind", "str"),
    req("spec", "str"),
    opt("payload", "str"),
    opt("queue", "str"),
    opt("partition_key", "str"),
    opt("rate_class", "str"),
    opt("priority", "i32"),
    opt("max_attempts", "u32"),
    opt("retention_ms", "i64"),
    opt("on_missed", "str"),
    opt("backfill_limit", "u32"),
    dflt("paused", "bool", False),
)


@bp.put("/periodic/<segment:schedule_id>")
def put_periodic(schedule_id: str) -> flask.Response:
    b = json_body(*PERIODIC_FIELDS)
    payload = b"" if b["payload"] is None else b64decode(b["payload"], "payload")
    # Only an absent (or null) value takes the default: "" is refused like any typo.
    on_missed = "skip" if b["on_missed"] is None else b["on_missed"]
    if on_missed not in ON_MISSED:
        raise ApiError(400, f"on_missed must be {'|'.join(ON_MISSED)}")
    # An unknown CRON_TZ zone or a bad field is a 400 here, at upsert, not at firing.
    schedule_spec.validate(b["spec"])
    schedule = {
        "id": schedule_id,
        "kind": b["kind"],
        "spec": b["spec"],
        "payload": payload,
        # Schedule defaults (note retention 0: periodic jobs are not kept).
        # `queue: ""` and `max_attempts: 0` are "not set", as on enqueue (the
        # envelope defaults them); other fields keep their checks.
        "queue": b["queue"] or "default",
        "partition_key": b["partition_key"] or "",
        "rate_class": b["rate_class"] or "",
        "priority": b["priority"] or 0,
        "max_attempts": b["max_attempts"] or 25,
        "retention_ms": b["retention_ms"] or 0,
        "on_missed": on_missed,
        "backfill_limit": b["backfill_limit"] or 0,
        "paused": b["paused"],
    }
    with producer_call():
        _authorize_schedule(schedule)
    store().upsert_schedule(schedule)
    return empty_ok()


def _authorize_schedule(schedule: dict[str, Any]) -> None:
    """Whoever may not enqueue a kind may not schedule it either (the authorizer
    sees a preview envelope of the schedule's job)."""
    authorizer = api_state().hooks.enqueue_authorizer
    if authorizer is None:
        return
    preview = Envelope(
        id=f"schedule:{schedule['id']}", kind=schedule["kind"], payload=schedule["payload"],
        queue=schedule["queue"], partition_key=schedule["partition_key"],
        rate_class=schedule["rate_class"], priority=schedule["priority"],
        max_attempts=schedule["max_attempts"], retention_ms=schedule["retention_ms"],
    ).validated()
    if not authorizer(enqueue_context(), preview):
        raise EnqueueForbidden(schedule["kind"])


@bp.delete("/periodic/<segment:schedule_id>")
def delete_periodic(schedule_id: str) -> flask.Response:
    store().delete_schedule(schedule_id)
    return no_content()


@bp.get("/periodic/<segment:schedule_id>/enqueue-events")
def periodic_events(schedule_id: str) -> flask.Response:
    p = query(dflt("limit", "u32", 30), opt("cursor", "u64"))
    events = store().list_schedule_events(schedule_id, p["cursor"], p["limit"])
    next_cursor = events[-1].event_id if events and len(events) == p["limit"] else None
    return json_response({"events": [event_json(e) for e in events],
                          "next_cursor": next_cursor})


@bp.post("/periodic/<segment:schedule_id>/run")
def run_periodic(schedule_id: str) -> flask.Response:
    """Fire once now, out of schedule; deduplicated per Idempotency-Key so a
    double-click cannot fire twice. Goes through the same producer client (authorizer,
    circuit breaker, middleware, hooks) as a direct enqueue."""
    s = store()
    if s.get_schedule(schedule_id) is None:
        raise ApiError(404, "no such schedule")
    key = idempotency_key()
    who = caller()
    if who.authenticated:
        # Scoped per caller, like the stored responses; hashed to fit the key limit.
        key = hashlib.sha256(f"{who.identity}\n{key}".encode()).hexdigest()
    with producer_call():
        job_id, replayed = run_schedule_now(s, schedule_id, key, client=producer(),
                                            context=enqueue_context())
    body: dict[str, Any] = {"id": job_id}
    if replayed:
        body["replayed"] = True
    return json_response(body, 202)
