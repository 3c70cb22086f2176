"""The audit log of operator actions: who (the token's name) did what to which jobs or
settings, when, with what outcome; and `GET /api/v1/audit`, which serves it.

Every accepted (2xx) mutating request is recorded, except an enqueue (producers'
traffic, which the job itself records) and a dry run (which changes nothing). A refused
request records nothing, and neither does an Idempotency-Key replay (the action ran
once, and was recorded then). The entry is written right after the change, in its own
transaction, by this blueprint's after-request step: the routes stay as they are, and a
route added later is recorded under its endpoint's name until it is given one here. If
that write fails, the change stands and the failure is logged; the answer is not turned
into an error for something that did happen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import flask

from headgate.core.records import AuditEntry, RateClassState

from .blueprint import bp, json_response
from .context import api_state, caller, store
from .errors import ApiError
from .params import dflt, opt, query

log = logging.getLogger("headgate.api")

MAX_LIMIT = 200
# A selection's entry lists this many of its ids (and how many there were).
MAX_IDS = 100
ANONYMOUS_REMOTE = "anonymous"
LOCAL = "local"
_BEFORE = "headgate_audit_before"

# Not audited: producers' enqueues (the job records who enqueued it) and a remote
# worker's traffic between registering and leaving (the job's attempts record it).
SKIPPED = frozenset({"api.enqueue", "api.simulate", "api.worker_heartbeat", "api.claim_jobs",
                     "api.extend_lease", "api.complete_job", "api.fail_job",
                     "api.snooze_job", "api.report_progress"})


def actor() -> str:
    """The caller's name: the token's, or without tokens `local` (a loopback-only
    server) or `anonymous` (HG_API_ALLOW_REMOTE=1: an upstream layer decided)."""
    who = caller()
    if who.authenticated:
        return who.name
    return ANONYMOUS_REMOTE if api_state().settings.allow_remote else LOCAL


def _body() -> dict[str, Any]:
    doc = flask.request.get_json(silent=True)
    return doc if isinstance(doc, dict) else {}


def _answer(response: flask.Response) -> Any:
    return response.get_json(silent=True) if response.is_json else None


def _arg(name: str) -> str:
    return str((flask.request.view_args or {}).get(name, ""))


Entry = tuple[str, str, dict[str, Any], str]  # action, target, detail, outcome
Describe = Callable[[flask.Response], Entry | None]


def _job(verb: str) -> Describe:
    def describe(_resp: flask.Response) -> Entry:
        detail: dict[str, Any] = {}
        body = _body()
        if verb == "reschedule":
            detail["scheduled_at_ms"] = body.get("scheduled_at_ms")
        elif verb == "edit_payload":
            detail["schema_version"] = body.get("schema_version")
            detail["payload_base64_chars"] = len(str(body.get("payload", "")))
        return f"job.{verb}", f"job:{_arg('job_id')}", detail, "ok"
    return describe


def _selection(resp: flask.Response) -> Entry:
    body, answer = _body(), _answer(resp) or {}
    succeeded = list(answer.get("succeeded", []))
    failed = list(answer.get("failed", []))
    outcome = "ok" if not failed else ("partial" if succeeded else "failed")
    detail = {"ids": succeeded[:MAX_IDS], "succeeded": len(succeeded),
              "failed": len(failed),
              "failed_ids": [f.get("id") for f in failed[:MAX_IDS]]}
    return f"jobs.{body.get('action')}", "jobs", detail, outcome


def _bulk(resp: flask.Response) -> Entry | None:
    op = _answer(resp) or {}
    if op.get("dry_run"):
        return None
    detail = {"selector": op.get("selector"), "operation_id": op.get("id"),
              "total_estimated": op.get("total_estimated"),
              "total_capped": op.get("total_capped")}
    return f"bulk.{op.get('action')}", "jobs", detail, "ok"


def _changed(kind: str, target: str, before: dict[str, Any] | None,
             after: dict[str, Any]) -> Entry:
    """create / pause / resume / edit, from the setting's values before and after."""
    def rest(values: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in values.items() if k != "paused"}

    if before is None:
        verb = "create"
    elif ("paused" in after and rest(before) == rest(after)
          and before["paused"] != after["paused"]):
        verb = "pause" if after["paused"] else "resume"
    else:
        verb = "edit"
    detail: dict[str, Any] = dict(after)
    if before is not None:
        detail["before"] = before
    return f"{kind}.{verb}", target, detail, "ok"


ADAPTIVE_KEYS = ("min", "max", "decrease_factor", "increase_step")


def _rate_values(r: RateClassState) -> dict[str, Any]:
    """A class's settings as an operator set them: an adaptive class's configured limit
    and burst, not where adaptation has taken them (that is not an operator's edit)."""
    a = r.adaptive
    if a is not None:
        return {"limit": a.configured_limit, "window_ms": r.window_ms,
                "burst": a.configured_burst, "paused": r.paused,
                "adaptive": {"min": a.min, "max": a.max, "decrease_factor": a.decrease_factor,
                             "increase_step": a.increase_step}}
    return {"limit": r.limit_per_window, "window_ms": r.window_ms, "burst": r.burst,
            "paused": r.paused}


def _rate_class_before() -> Any:
    name = _arg("name")
    found = next((r for r in store().rate_classes() if r.name == name), None)
    return None if found is None else _rate_values(found)


def _rate_class(_resp: flask.Response) -> Entry:
    body = _body()
    limit = body.get("limit")
    burst = body.get("burst")
    after = {"limit": limit, "window_ms": body.get("window_ms"),
             "burst": max(limit, 1) if burst is None and isinstance(limit, int) else burst,
             "paused": bool(body.get("paused", False))}
    adaptive = body.get("adaptive")
    if isinstance(adaptive, dict):
        after["adaptive"] = {k: adaptive.get(k) for k in ADAPTIVE_KEYS}
    name = _arg("name")
    return _changed("rate_class", f"rate_class:{name}", flask.g.get(_BEFORE), after)


def _limit_values(c: dict[str, Any]) -> dict[str, Any]:
    return {"queue": c["queue"], "max_concurrent": c["max_concurrent"],
            "on_saturated": c["on_saturated"]}


def _concurrency_before() -> Any:
    name = _arg("name")
    found = next((c for c in store().concurrency_limits() if c.name == name), None)
    return None if found is None else {"queue": found.queue,
                                       "max_concurrent": found.max_concurrent,
                                       "on_saturated": found.on_saturated}


def _concurrency(_resp: flask.Response) -> Entry:
    after = _limit_values(_body())
    return _changed("concurrency_limit", f"concurrency_limit:{_arg('name')}",
                    flask.g.get(_BEFORE), after)


SCHEDULE_FIELDS = ("kind", "spec", "queue", "paused", "on_missed", "rate_class",
                   "priority", "max_attempts")


def _schedule_before() -> Any:
    found = store().get_schedule(_arg("schedule_id"))
    if found is None:
        return None
    stored = asdict(found)
    return {k: stored[k] for k in SCHEDULE_FIELDS}


def _schedule(_resp: flask.Response) -> Entry:
    body = _body()
    before = flask.g.get(_BEFORE)
    after = {k: body.get(k) for k in SCHEDULE_FIELDS}
    # The stored defaults, so an unchanged field compares equal to what was stored.
    after["queue"] = after["queue"] or "default"
    after["paused"] = bool(after["paused"])
    after["on_missed"] = after["on_missed"] or "skip"
    after["rate_class"] = after["rate_class"] or ""
    after["priority"] = after["priority"] or 0
    after["max_attempts"] = after["max_attempts"] or 25
    return _changed("schedule", f"schedule:{_arg('schedule_id')}", before, after)


def _schedule_run(resp: flask.Response) -> Entry | None:
    answer = _answer(resp) or {}
    if answer.get("replayed"):
        return None
    return ("schedule.run", f"schedule:{_arg('schedule_id')}",
            {"job_id": answer.get("id")}, "ok")


def _simple(action: str, target: Callable[[], str],
            detail: Callable[[flask.Response], dict[str, Any]] = lambda _r: {}) -> Describe:
    return lambda resp: (action, target(), detail(resp), "ok")


def _force() -> dict[str, Any]:
    return {"force": flask.request.args.get("force") == "true"}


def _queue_delete(resp: flask.Response) -> Entry:
    detail = _force()
    answer = _answer(resp)
    if isinstance(answer, dict) and answer.get("operation_id"):
        detail["operation_id"] = answer["operation_id"]
    return "queue.delete", f"queue:{_arg('queue')}", detail, "ok"


def _prune(resp: flask.Response) -> Entry | None:
    report = _answer(resp) or {}
    if report.get("dry_run"):
        return None
    detail = {"older_than_ms": _body().get("older_than_ms"), "deleted": report.get("deleted"),
              "counts": report.get("counts")}
    return "system.prune", "jobs", detail, "ok"


DESCRIBE: dict[str, Describe] = {
    "api.actions": _selection,
    "api.delete_job": _job("delete"),
    "api.retry_job": _job("retry"),
    "api.cancel_job": _job("cancel"),
    "api.promote_job": _job("promote"),
    "api.reschedule": _job("reschedule"),
    "api.edit_payload": _job("edit_payload"),
    "api.bulk": _bulk,
    "api.put_periodic": _schedule,
    "api.delete_periodic": _simple("schedule.delete",
                                   lambda: f"schedule:{_arg('schedule_id')}"),
    "api.run_periodic": _schedule_run,
    "api.put_rate_class": _rate_class,
    "api.delete_rate_class": _simple("rate_class.delete", lambda: f"rate_class:{_arg('name')}",
                                     lambda _r: _force()),
    "api.put_concurrency_limit": _concurrency,
    "api.delete_concurrency_limit": _simple(
        "concurrency_limit.delete", lambda: f"concurrency_limit:{_arg('name')}",
        lambda _r: _force()),
    "api.quarantine_release": _simple(
        "quarantine.release", lambda: f"fingerprint:{_arg('fingerprint')}",
        lambda r: {"released_jobs": int(r.headers.get("x-released-jobs", "0") or 0)}),
    "api.put_queue": _simple("queue.weight", lambda: f"queue:{_arg('queue')}",
                             lambda _r: {"weight": _body().get("weight")}),
    "api.delete_queue": _queue_delete,
    "api.sample_queue_memory": _simple(
        "queues.sample_memory", lambda: "queues",
        lambda r: {"sampled_queues": (_answer(r) or {}).get("sampled_queues")}),
    "api.pause_queue": _simple("queue.pause", lambda: f"queue:{_arg('queue')}"),
    "api.resume_queue": _simple("queue.resume", lambda: f"queue:{_arg('queue')}"),
    "api.put_enqueue_limit": _simple(
        "enqueue_limit.set", lambda: f"queue:{_arg('queue')}",
        lambda _r: {"max_unfinished_jobs": _body().get("max_unfinished_jobs")}),
    "api.delete_enqueue_limit": _simple("enqueue_limit.remove",
                                        lambda: f"queue:{_arg('queue')}"),
    "api.system_prune": _prune,
    "api.signal_worker": _simple("worker.signal", lambda: f"worker:{_arg('worker_id')}",
                                 lambda _r: {"command": _body().get("command")}),
    "api.register_worker": lambda r: (
        "worker.register", f"worker:{(_answer(r) or {}).get('worker_id', '')}",
        {k: (_answer(r) or {}).get(k) for k in ("queues", "capacity", "agent")}, "ok"),
    "api.deregister_worker": _simple(
        "worker.deregister", lambda: f"worker:{_arg('worker_id')}",
        lambda r: {"released": (_answer(r) or {}).get("released")}),
}
# Settings whose values before the change tell create from edit from pause/resume.
BEFORE: dict[str, Callable[[], Any]] = {
    "api.put_rate_class": _rate_class_before,
    "api.put_concurrency_limit": _concurrency_before,
    "api.put_periodic": _schedule_before,
}


def _fallback(_resp: flask.Response) -> Entry:
    """A mutating route with no description yet: its endpoint and path."""
    endpoint = (flask.request.endpoint or "unknown").removeprefix("api.")
    return endpoint, flask.request.path.removeprefix(bp.url_prefix or ""), {}, "ok"


def _audited() -> bool:
    request = flask.request
    return (request.method in ("POST", "PUT", "DELETE", "PATCH")
            and request.endpoint is not None and request.endpoint not in SKIPPED)


@bp.before_request
def _remember_before() -> None:
    """Runs after the blueprint's guard: only for a request it let through."""
    read = BEFORE.get(flask.request.endpoint or "")
    if read is not None and _audited():
        try:
            flask.g.setdefault(_BEFORE, read())
        except Exception:  # noqa: BLE001 - the entry then says create; the change goes on
            log.warning("audit: could not read the setting before its change", exc_info=True)


@bp.after_request
def _record(response: flask.Response) -> flask.Response:
    if not (200 <= response.status_code < 300) or not _audited():
        return response
    if response.headers.get("Idempotent-Replayed") == "true":
        return response
    try:
        described = DESCRIBE.get(flask.request.endpoint or "", _fallback)(response)
        if described is not None:
            action, target, detail, outcome = described
            store().record_audit(actor(), action, target[:1024] or "-",
                                 status=response.status_code, outcome=outcome,
                                 detail=detail)
    except Exception:  # noqa: BLE001 - the change happened; its answer still goes out
        log.error("audit: could not record %s %s", flask.request.method,
                  flask.request.path, exc_info=True)
    return response


def entry_json(e: AuditEntry) -> dict[str, Any]:
    return {"id": e.id, "at_ms": e.at_ms, "actor": e.actor, "action": e.action,
            "target": e.target, "status": e.status, "outcome": e.outcome,
            "detail": dict(e.detail)}


@bp.get("/audit")
def audit() -> flask.Response:
    """Newest first; `next_cursor` (the page's last id) is null on the last page."""
    p = query(dflt("limit", "u32", 50), opt("cursor", "u64"), opt("action", "str"),
              opt("target", "str"), opt("target_prefix", "str"), opt("since_ms", "i64"))
    if not 1 <= p["limit"] <= MAX_LIMIT:
        raise ApiError(400, "invalid query parameter `limit`")
    if p["cursor"] is not None and p["cursor"] > 2**63 - 1:
        raise ApiError(400, "invalid query parameter `cursor`")
    since = p["since_ms"]
    entries = store().list_audit(
        action=p["action"] or None, target=p["target"] or None,
        target_prefix=p["target_prefix"] or None,
        since_ms=None if since is None else max(since, 0), cursor=p["cursor"],
        limit=p["limit"])
    next_cursor = entries[-1].id if len(entries) == p["limit"] else None
    return json_response({"entries": [entry_json(e) for e in entries],
                          "next_cursor": next_cursor})
