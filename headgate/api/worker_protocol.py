"""The worker protocol (docs/api.md, Worker protocol): a worker in any language
registers, claims, extends, finishes and heartbeats over HTTP, under the same admission
as a Python worker. This module only maps HTTP to `headgate.worker.remote`, which holds
the sessions and calls the store; a worker token (auth.py) reaches these routes and
nothing else, and only for the queues it is bound to.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import flask

from headgate.core import Claim
from headgate.core.job import Blob
from headgate.worker.remote import WorkerConflict, WorkerForbidden

from .blueprint import bp, json_response, no_content
from .context import caller, remote_workers
from .errors import ApiError
from .jobs import b64decode, b64encode
from .params import INVALID_BODY, dflt, json_body, opt, parse_json_document, req
from .workers import WORKER_STALE_MS

# The fencing pair every call about one claimed job names.
LEASE = (req("lease_id", "str"), req("fence", "u64"))


@bp.errorhandler(WorkerConflict)
def _conflict(exc: WorkerConflict) -> flask.Response:
    return ApiError(409, str(exc), **exc.fields).response()


@bp.errorhandler(WorkerForbidden)
def _forbidden(exc: WorkerForbidden) -> flask.Response:
    return ApiError(403, str(exc)).response()


def _allowed() -> frozenset[str] | None:
    """The queues the caller may serve (None: any)."""
    who = caller()
    return who.queues if who.worker else None


def _workers() -> Any:
    return remote_workers(WORKER_STALE_MS)


def _client_connected() -> Callable[[], bool] | None:
    """Whether the caller's connection is still open, from a peek at its socket (the
    server's: gunicorn's or werkzeug's; None where there is none to peek at). A killed
    worker's pending long poll must not go on claiming jobs nobody will run."""
    env = flask.request.environ
    sock = env.get("gunicorn.socket") or env.get("werkzeug.socket")
    if not isinstance(sock, socket.socket):
        return None

    def connected() -> bool:
        try:
            # A client sends nothing more until it has its answer: b"" is its close. The
            # plain socket's recv reads the TCP stream under a TLS socket too (whose own
            # recv refuses flags), where a killed client's close shows the same way.
            return socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except (BlockingIOError, InterruptedError):
            return True  # open, nothing to read
        except OSError:
            return False  # reset or closed
    return connected


def claimed_json(claim: Claim) -> dict[str, Any]:
    job = claim.job
    return {
        "id": job.id, "kind": job.kind, "queue": job.queue,
        "payload": b64encode(job.payload or b""), "schema_version": job.schema_version,
        "attempt": job.attempt, "crash_attempt": job.crash_attempt,
        "max_attempts": job.max_attempts, "priority": job.priority,
        "partition_key": job.partition_key, "rate_class": job.rate_class,
        "weight": job.weight, "tags": list(job.tags), "headers": job.headers,
        "enqueued_at_ms": job.enqueued_at_ms,
        "lease_id": claim.lease_id, "fence": claim.fence,
        "lease_expires_at_ms": claim.lease_expires_at_ms,
    }


@bp.post("/workers")
def register_worker() -> flask.Response:
    b = json_body(req("queues", "str_list"), req("capacity", "u32"),
                  dflt("agent", "str", ""), dflt("kinds", "str_list", []),
                  opt("worker_id", "str"), opt("host", "str"), opt("pid", "u32"))
    remote = _workers()
    session = remote.register(
        queues=b["queues"], capacity=b["capacity"], agent=b["agent"], kinds=b["kinds"],
        worker_id=b["worker_id"], host=b["host"] or flask.request.remote_addr or "",
        pid=b["pid"] or 0, allowed=_allowed())
    return json_response({
        "worker_id": session.worker_id, "queues": list(session.queues),
        "kinds": sorted(session.kinds), "capacity": session.capacity,
        "agent": session.agent, "lease_ms": remote.lease_ms,
        "heartbeat_ms": remote.heartbeat_ms, "max_wait_ms": remote.max_wait_ms,
    }, 201)


def _running() -> list[tuple[str, int]]:
    """`running: [{job_id, fence}]`, the jobs the worker says it runs."""
    doc = parse_json_document()
    items = doc.get("running", []) if isinstance(doc, dict) else []
    if items is None:
        return []
    if not isinstance(items, list):
        raise ApiError(422, INVALID_BODY)
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise ApiError(422, INVALID_BODY)
        job_id, fence = item.get("job_id"), item.get("fence")
        if not isinstance(job_id, str) or isinstance(fence, bool) \
                or not isinstance(fence, int) or not 0 <= fence < 2**63:
            raise ApiError(422, INVALID_BODY)
        out.append((job_id, fence))
    return out


@bp.post("/workers/<segment:worker_id>/heartbeat")
def worker_heartbeat(worker_id: str) -> flask.Response:
    json_body()  # a JSON object, like every other body
    running = _running()
    remote = _workers()
    reply = remote.heartbeat(worker_id, running, allowed=_allowed())
    return json_response({
        "signal": reply.signal, "status": reply.status, "inflight": reply.inflight,
        "cancelled": [{"job_id": j, "fence": f} for j, f in reply.cancelled],
        "heartbeat_ms": remote.heartbeat_ms,
    })


@bp.post("/workers/<segment:worker_id>/claim")
def claim_jobs(worker_id: str) -> flask.Response:
    b = json_body(opt("max", "u32"), dflt("wait_ms", "u32", 0), opt("lease_ms", "u32"))
    answer = _workers().claim(worker_id, b["max"], b["wait_ms"], b["lease_ms"],
                              allowed=_allowed(), connected=_client_connected())
    return json_response({"jobs": [claimed_json(c) for c in answer.claims],
                          "status": answer.status})


@bp.post("/workers/<segment:worker_id>/jobs/<segment:job_id>/extend")
def extend_lease(worker_id: str, job_id: str) -> flask.Response:
    b = json_body(*LEASE, opt("lease_ms", "u32"))
    expires = _workers().extend(worker_id, job_id, b["lease_id"], b["fence"], b["lease_ms"],
                                allowed=_allowed())
    return json_response({"lease_expires_at_ms": expires})


def _blob(b: dict[str, Any], name: str) -> Blob | None:
    if b[name] is None:
        return None
    return Blob(b64decode(b[name], name), b[f"{name}_schema_version"])


@bp.post("/workers/<segment:worker_id>/jobs/<segment:job_id>/complete")
def complete_job(worker_id: str, job_id: str) -> flask.Response:
    b = json_body(*LEASE, opt("result", "str"), dflt("result_schema_version", "u32", 1),
                  opt("output", "str"), dflt("output_schema_version", "u32", 1))
    for name in ("result_schema_version", "output_schema_version"):
        if not 1 <= b[name] < 2**31:
            raise ApiError(400, f"{name} must be 1..{2**31 - 1}")
    _workers().complete(worker_id, job_id, b["lease_id"], b["fence"],
                        result=_blob(b, "result"), output=_blob(b, "output"),
                        allowed=_allowed())
    return no_content()


@bp.post("/workers/<segment:worker_id>/jobs/<segment:job_id>/fail")
def fail_job(worker_id: str, job_id: str) -> flask.Response:
    b = json_body(*LEASE, req("error", "str"), dflt("outcome", "str", "retry"),
                  opt("retry_in_ms", "u64"), dflt("logs", "str_list", []))
    applied = _workers().fail(worker_id, job_id, b["lease_id"], b["fence"], error=b["error"],
                              outcome=b["outcome"], delay_ms=b["retry_in_ms"],
                              logs=b["logs"], allowed=_allowed())
    return json_response({"outcome": applied})


@bp.post("/workers/<segment:worker_id>/jobs/<segment:job_id>/snooze")
def snooze_job(worker_id: str, job_id: str) -> flask.Response:
    b = json_body(*LEASE, req("delay_ms", "u64"))
    _workers().snooze(worker_id, job_id, b["lease_id"], b["fence"], b["delay_ms"],
                      allowed=_allowed())
    return no_content()


@bp.post("/workers/<segment:worker_id>/jobs/<segment:job_id>/progress")
def report_progress(worker_id: str, job_id: str) -> flask.Response:
    b = json_body(*LEASE, req("current", "u64"), req("total", "u64"), opt("message", "str"))
    _workers().progress(worker_id, job_id, b["lease_id"], b["fence"], b["current"],
                        b["total"], b["message"], allowed=_allowed())
    return no_content()


@bp.delete("/workers/<segment:worker_id>")
def deregister_worker(worker_id: str) -> flask.Response:
    released = _workers().deregister(worker_id, allowed=_allowed())
    return json_response({"worker_id": worker_id, "released": released})
