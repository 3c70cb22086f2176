"""Jobs: list (with the `q` grammar), enqueue, counts, per-id actions, and the
per-job views and operator actions."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import flask

from headgate.core import (
    Duplicate,
    Envelope,
    HeadgateError,
    InvalidInput,
    Job,
    JobFilter,
    State,
    fingerprint,
)
from headgate.core.cursors import decode_cursor
from headgate.core.forecast import Prediction
from headgate.core.ids import new_id
from headgate.core.job_search import parse_search
from headgate.services.forecasting import Forecaster
from headgate.web.segments import Segment

from . import idempotency
from .auth import Caller
from .blueprint import bp, json_response, no_content
from .context import (
    api_state,
    caller,
    enqueue_context,
    idempotency_key,
    producer,
    producer_call,
    store,
)
from .errors import ApiError, raw_msg
from .params import dflt, json_body, opt, query, req

MAX_ACTION_IDS = 1000
# The static routes beside `/jobs/{id}`: they win whatever the method.
STATIC_JOB_PATHS = frozenset({"counts", "actions", "bulk"})
CURSOR = re.compile(r"[A-Za-z0-9_-]{1,1400}={0,2}")


class JobId(Segment):
    """A job id in `/jobs/{id}` itself, never one of the static paths beside it.

    Werkzeug tries the `{id}` route when a static one matches the path but not the
    method, so `DELETE /jobs/counts` would delete a job called "counts". Not matching
    those names here leaves the static route's 405 and its own Allow header, as for
    any static path (a check in `to_python` would be too late: the `{id}` routes'
    methods would already be in the Allow header).
    """

    regex = "(?!(?:{})\\Z)[^/]+".format("|".join(sorted(map(re.escape, STATIC_JOB_PATHS))))


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str, what: str) -> bytes:
    """Strict standard base64 (padding required, no stray characters, canonical)."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ApiError(400, f"{what} must be base64") from None
    if base64.b64encode(data).decode("ascii") != text:
        raise ApiError(400, f"{what} must be base64")
    return data


def is_orphaned(job: Job, now_ms: int) -> bool:
    """Running on a lease that has already expired: its worker is gone and the
    reclaimer has not taken it back yet (the body's `orphaned`)."""
    return (
        job.state is State.RUNNING
        and job.lease_expires_at_ms is not None
        and job.lease_expires_at_ms < now_ms
    )


def job_json(job: Job, now_ms: int) -> dict[str, Any]:
    """The job body; the fields after `tags` are additive (the dashboard's
    lifecycle timeline and lease view need them)."""
    body: dict[str, Any] = {
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "state": job.state.value,
        "schema_version": job.schema_version,
        "priority": job.priority,
        "attempt": job.attempt,
        "crash_attempt": job.crash_attempt,
        "orphaned": is_orphaned(job, now_ms),
        "max_attempts": job.max_attempts,
        "partition_key": job.partition_key,
        "rate_class": job.rate_class,
        "sticky_worker": job.sticky_worker,
        "weight": job.weight,
        "fingerprint": job.fingerprint,
        "enqueued_at_ms": job.enqueued_at_ms,
        "scheduled_at_ms": job.scheduled_at_ms,
        "periodic_origin": job.periodic_origin,
        "finalized_at_ms": job.finalized_at_ms,
        "errors": job.errors,
        "tags": list(job.tags),
        "attempted_at_ms": job.attempted_at_ms,
        "worker_id": job.worker_id,
        "lease_expires_at_ms": job.lease_expires_at_ms,
        "fence": job.fence,
        "retention_ms": job.retention_ms,
        "headers": job.headers,
        "cancel_requested": job.cancel_requested,
    }
    if job.payload is not None:
        # Only present when explicitly requested (payloads are hidden by default).
        body["payload"] = b64encode(job.payload)
    return body


# Epoch ms, as every time in this API: after is inclusive, before exclusive.
TIME_RANGE_PARAMS = ("enqueued_after_ms", "enqueued_before_ms", "finished_after_ms",
                     "finished_before_ms")


def _split_tags(raw: str | None) -> list[str]:
    return [t for t in (raw or "").split(",") if t]


@bp.get("/jobs")
def list_jobs() -> flask.Response:
    p = query(
        opt("q", "str"), opt("queue", "str"), opt("state", "str"), opt("kind", "str"),
        opt("partition_key", "str"), opt("cursor", "str"), opt("limit", "u32"),
        opt("tags_all", "str"), opt("tags_any", "str"), dflt("include_payload", "bool", False),
        *(opt(name, "i64") for name in TIME_RANGE_PARAMS),
    )
    f = JobFilter(queue=p["queue"], state=p["state"], kind=p["kind"],
                  partition_key=p["partition_key"],
                  **{name: p[name] for name in TIME_RANGE_PARAMS})
    f.tags_all.extend(_split_tags(p["tags_all"]))
    f.tags_any.extend(_split_tags(p["tags_any"]))
    if p["q"] is not None:
        parse_search(p["q"], f)
    limit = 50 if p["limit"] is None else p["limit"]
    if p["cursor"]:
        # Cursors are opaque tokens we issued (with a check, headgate.core.cursors):
        # anything else is refused like any other unparsable parameter.
        try:
            if not CURSOR.fullmatch(p["cursor"]):
                raise InvalidInput("invalid cursor")
            decode_cursor(p["cursor"])
        except InvalidInput:
            raise ApiError(400, "invalid query parameter `cursor`") from None
    s = store()
    page = s.list_jobs(f, p["cursor"] or None, limit, include_payload=p["include_payload"])
    now = s.now_ms()
    return json_response({
        "jobs": [job_json(j, now) for j in page.jobs],
        "next_cursor": page.next_cursor,
        "count_is_approximate": False,
        # Additive: the page stopped at its scan bound (next_cursor goes on).
        "scan_limited": page.scan_limited,
    })


ENQUEUE_FIELDS = (
    req("kind", "str"),
    opt("schema_version", "u32"),
    req("payload", "str"),
    opt("queue", "str"),
    opt("priority", "i32"),
    opt("partition_key", "str"),
    opt("rate_class", "str"),
    opt("weight", "u32"),
    opt("scheduled_at_ms", "i64"),
    opt("unique_key", "str"),
    opt("unique_window_ms", "i64"),
    opt("unique_replace", "u32"),
    opt("unique_debounce_ms", "i64"),
    dflt("unique_exclude_kind", "bool", False),
    dflt("tags", "str_list", []),
    dflt("pending", "bool", False),
    dflt("sticky_worker", "str", ""),
    opt("max_attempts", "u32"),
    opt("retention_ms", "i64"),
    opt("id", "str"),
    # Additive: the envelope's opaque string headers (e.g. traceparent).
    dflt("headers", "str_map", {}),
)


# The zero values that mean "the default" on enqueue and schedule upsert.
DEFAULTED_ZEROES: dict[str, object] = {"queue": "", "max_attempts": 0}


def idem_unique_key(key: str, who: Caller) -> bytes:
    """The Idempotency-Key as the dedup key. Namespaced by the caller when callers are
    authenticated, so one caller's key can never reveal another caller's job id."""
    prefix = f"idem:{who.identity}:" if who.authenticated else "idem:"
    return (prefix + key).encode("utf-8", "surrogateescape")


@bp.post("/jobs")
def enqueue() -> flask.Response:
    """The input is read before the key is claimed, so the write transaction (SQLite's
    one writer) holds only the key's record, the enqueue and the stored answer: one
    commit per request. A refused input still answers as the key says first.
    Embedding code (middleware, hooks) runs outside any write transaction instead: the
    key is claimed first, in its own, as on every other mutating route."""
    if api_state().embedding_code_enqueues():
        return _enqueue_claimed_first()
    try:
        env, idem_backed = _enqueue_envelope()
        env = env.validated()
    except (ApiError, HeadgateError) as exc:
        answer = idempotency.unclaimed_error(exc)
        if answer is exc:
            raise
        if isinstance(answer, BaseException):
            raise answer from None
        return answer
    # All but the writes happens before the write transaction, whose holder is the one
    # writer (SQLite) or holds the queue's lock (PostgreSQL): threads waiting for it
    # contend with this one for the GIL at each statement.
    wanted = idempotency.request_hash()
    scope = idempotency.scope_key(idempotency_key())
    resp = json_response({"id": env.id}, 201)

    app = flask.current_app._get_current_object()  # type: ignore[attr-defined]

    def replay_of(dup: Duplicate) -> tuple[int, dict[str, str], bytes] | None:
        # Replay, not conflict: same Idempotency-Key → same job. A caller's own unique
        # key held by another job stores nothing: a retry asks again. Its own app
        # context: the store may call it from another request's thread (SQLite's
        # group commit).
        if not idem_backed:
            return None
        with app.app_context():
            return idempotency.stored_parts(_joined(dup))

    done = store().enqueue_keyed(scope, wanted, env, idempotency.stored_parts(resp), replay_of)
    if done.record is not None:
        return idempotency.answer_existing(done.record, wanted)
    if done.duplicate is not None:
        if idem_backed:
            return _joined(done.duplicate)
        raise done.duplicate
    return resp


def _joined(dup: Duplicate) -> flask.Response:
    return json_response({"id": dup.existing_id, "replayed": True}, 201)


def _enqueue_claimed_first() -> flask.Response:
    answer = idempotency.claim()
    if answer is not None:
        return answer
    env, idem_backed = _enqueue_envelope()
    try:
        with producer_call():
            ids = producer().enqueue_many([env], context=enqueue_context())
    except Duplicate as dup:
        if idem_backed:
            return _joined(dup)
        raise
    return json_response({"id": ids[0]}, 201)


def _enqueue_envelope() -> tuple[Envelope, bool]:
    """The request's envelope, and whether its unique key is the Idempotency-Key."""
    b = json_body(*ENQUEUE_FIELDS)
    with producer_call():
        return enqueue_envelope(b, idempotency_key(), caller())


def enqueue_envelope(b: dict[str, Any], key: str, who: Caller) -> tuple[Envelope, bool]:
    """The envelope of an enqueue body's fields (`read_fields` of ENQUEUE_FIELDS), and
    whether its unique key is the Idempotency-Key `key`."""
    if b["weight"] == 0:
        raise ApiError(400, "weight must be >= 1")
    if (b["unique_replace"] or 0) != 0 and b["unique_key"] is None:
        raise ApiError(400, "unique_replace requires caller-supplied unique_key")
    payload = b64decode(b["payload"], "payload")
    caller_unique = None if b["unique_key"] is None else b64decode(b["unique_key"], "unique_key")
    # The Idempotency-Key IS the dedup key when the caller supplies no unique_key of
    # their own: a retried POST joins the first job instead of creating a second.
    idem_backed = caller_unique is None
    unique_key = caller_unique if caller_unique is not None else idem_unique_key(key, who)
    job_id = b["id"] if b["id"] is not None else new_id()
    fields: dict[str, Any] = {
        "id": job_id,
        "kind": b["kind"],
        "payload": payload,
        "unique_key": unique_key,
        "unique_exclude_kind": b["unique_exclude_kind"],
        "tags": b["tags"],
        "pending": b["pending"],
        "sticky_worker": b["sticky_worker"],
        "headers": b["headers"],
    }
    # Absent fields take the envelope's defaults. So do `queue: ""` and
    # `max_attempts: 0`: a client whose serializer writes every field sends those for
    # "not set".
    for name in DEFAULTED_ZEROES:
        if b[name] == DEFAULTED_ZEROES[name]:
            b[name] = None
    for name in ("schema_version", "queue", "priority", "partition_key", "rate_class",
                 "weight", "scheduled_at_ms", "unique_window_ms", "unique_replace",
                 "unique_debounce_ms", "max_attempts", "retention_ms"):
        if b[name] is not None:
            fields[name] = b[name]
    return Envelope(**fields), idem_backed


@bp.get("/jobs/counts")
def counts() -> flask.Response:
    p = query(opt("queue", "str"))
    return json_response({"counts": store().counts(p["queue"]), "approximate": False})


@bp.post("/jobs/actions")
def actions() -> flask.Response:
    b = json_body(req("action", "str"), req("ids", "str_list"))
    if len(b["ids"]) > MAX_ACTION_IDS:
        raise ApiError(400, f"at most {MAX_ACTION_IDS} ids per call")
    s = store()
    handlers = {"retry": s.operator_retry, "cancel": s.operator_cancel, "delete": s.delete_job}
    action = b["action"]
    # Checked before any id, so a typo is reported even for an empty list.
    if action != "archive" and action not in handlers:
        raise ApiError(400, f"unknown action `{action}`")
    succeeded: list[str] = []
    failed: list[dict[str, str]] = []
    for job_id in b["ids"]:
        try:
            if action == "archive":
                # No operator_archive row in the transition table; surfaced per id
                # rather than silently doing something else.
                raise InvalidInput("operator_archive is not in the transition table")
            handlers[action](job_id)
        except HeadgateError as exc:
            # A job that finished before the click is not an error for the batch.
            failed.append({"id": job_id, "reason": raw_msg(exc)})
        else:
            succeeded.append(job_id)
    return json_response({"succeeded": succeeded, "failed": failed})


@bp.get("/jobs/<job_id:job_id>")
def get_job(job_id: str) -> flask.Response:
    p = query(dflt("include_payload", "bool", False))
    s = store()
    job = s.get_job(job_id, include_payload=p["include_payload"])
    if job is None:
        raise ApiError(404, "no such job")
    return json_response(job_json(job, s.now_ms()))


@bp.delete("/jobs/<job_id:job_id>")
def delete_job(job_id: str) -> flask.Response:
    store().delete_job(job_id)
    return no_content()


@bp.get("/jobs/<segment:job_id>/result")
def get_job_result(job_id: str) -> flask.Response:
    blob = store().get_result(job_id)
    if blob is None:
        raise ApiError(404, "no result for job")
    return json_response({"schema_version": blob.schema_version, "bytes": b64encode(blob.bytes)})


@bp.get("/jobs/<segment:job_id>/output")
def get_job_output(job_id: str) -> flask.Response:
    blob = store().get_output(job_id)
    if blob is None:
        raise ApiError(404, "no output for job")
    return json_response({
        "schema_version": blob.schema_version,
        "bytes": b64encode(blob.bytes),
        "fence": blob.fence,
        "updated_at_ms": blob.updated_at_ms,
    })


@bp.get("/jobs/<segment:job_id>/progress")
def get_job_progress(job_id: str) -> flask.Response:
    progress = store().get_progress(job_id)
    if progress is None:
        raise ApiError(404, "no progress for job")
    return json_response({
        "current": progress.current,
        "total": progress.total,
        "message": progress.message,
        "fence": progress.fence,
        "updated_at_ms": progress.updated_at_ms,
    })


@bp.post("/jobs/<segment:job_id>/retry")
def retry_job(job_id: str) -> flask.Response:
    store().operator_retry(job_id)
    return no_content()


@bp.post("/jobs/<segment:job_id>/cancel")
def cancel_job(job_id: str) -> flask.Response:
    store().operator_cancel(job_id)
    return no_content()


@bp.post("/jobs/<segment:job_id>/promote")
def promote_job(job_id: str) -> flask.Response:
    store().promote_job(job_id)
    return no_content()


@bp.post("/jobs/<segment:job_id>/reschedule")
def reschedule(job_id: str) -> flask.Response:
    b = json_body(req("scheduled_at_ms", "i64"))
    store().reschedule_job(job_id, b["scheduled_at_ms"])
    return no_content()


@bp.put("/jobs/<segment:job_id>/payload")
def edit_payload(job_id: str) -> flask.Response:
    b = json_body(req("payload", "str"), opt("schema_version", "u32"))
    payload = b64decode(b["payload"], "payload")
    s = store()
    job = s.get_job(job_id)
    if job is None:
        raise ApiError(404, "no such job")
    # The fingerprint is a function of (kind, payload) and must change with the edit.
    fp = fingerprint(job.kind, payload)
    version = job.schema_version if b["schema_version"] is None else b["schema_version"]
    s.edit_payload(job_id, payload, version, fp)
    return no_content()


@bp.get("/jobs/<segment:job_id>/admission")
def admission(job_id: str) -> flask.Response:
    """The store's explanation, plus `expected_start` (docs/forecast.md): in how many
    ms the job is expected to start, with its 10th-90th percentile range, or null
    with the reason nothing can be known."""
    s = store()
    explanation = s.explain_admission(job_id)
    if explanation is None:
        raise ApiError(404, "no such job")
    body = explanation.as_dict()
    job = s.get_job(job_id)
    expected = (Forecaster(s).predict_job(job, explanation) if job is not None
                else Prediction.unknown("not_waiting"))
    body["expected_start"] = expected.as_dict()
    return json_response(body)
