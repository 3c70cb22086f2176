"""The error envelope of the control API (docs/api.md) and the store-error mapping.

Every failure leaves as JSON `{"error": "..."}` — plus structured fields where a client
acts on them (409 duplicate, 423 quarantine, 429 backpressure, 403 forbidden, 503
circuit) — with fixed status codes and raw store messages, so clients branch on
status and fields, never on a framework's prose or an HTML error page.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import flask
from werkzeug.exceptions import HTTPException

from headgate.core import (
    Backpressure,
    CircuitOpen,
    Duplicate,
    EnqueueForbidden,
    HeadgateError,
    IdConflict,
    InvalidInput,
    InvalidTransition,
    LeaseLost,
    NotFound,
    Quarantined,
    StoreUnavailable,
)
from headgate.web.errors import envelope_response, error_response

log = logging.getLogger("headgate.api")

API_PREFIX = "/api/"


class ApiError(Exception):
    """Raised by handlers and parsers; rendered as the JSON envelope."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None,
                 **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = {"error": message, **fields}
        self.headers = headers or {}

    def response(self) -> flask.Response:
        return envelope_response(self.status, self.body, self.headers)


def store_error(exc: HeadgateError) -> ApiError:
    """The status each store error answers with (docs/api.md, Conventions)."""
    if isinstance(exc, Duplicate):
        return ApiError(409, "duplicate unique key", existing_id=exc.existing_id,
                        replaced=exc.replaced)
    if isinstance(exc, IdConflict):
        return ApiError(409, str(exc))
    if isinstance(exc, Quarantined):
        return ApiError(423, "fingerprint is quarantined", fingerprint=exc.fingerprint)
    if isinstance(exc, Backpressure):
        return ApiError(429, "enqueue backpressure", queue=exc.queue, limit=exc.limit,
                        current=exc.current, incoming=exc.incoming)
    if isinstance(exc, NotFound):
        return ApiError(404, str(exc))
    if isinstance(exc, InvalidInput):
        # The raw message: the 400 already says "invalid".
        return ApiError(400, str(exc))
    if isinstance(exc, InvalidTransition | LeaseLost):
        # An action the job's current state does not allow is a conflict with that
        # state, not a server fault: 409, raw message.
        return ApiError(409, str(exc))
    if isinstance(exc, EnqueueForbidden):
        return ApiError(403, "enqueue forbidden", kind=exc.kind)
    if isinstance(exc, CircuitOpen):
        retry_s = max(1, math.ceil(exc.retry_after_ms / 1000))
        return ApiError(503, "enqueue circuit open", headers={"Retry-After": str(retry_s)},
                        retry_after_ms=exc.retry_after_ms, state=exc.state)
    if isinstance(exc, StoreUnavailable):
        message = str(exc)
        if not message.startswith("store unavailable"):
            message = f"store unavailable: {message}"
        return ApiError(503, message, headers={"Retry-After": "1"})
    return ApiError(500, str(exc) or type(exc).__name__)


def raw_msg(exc: HeadgateError) -> str:
    """What `/jobs/actions` reports per failed id: the same text the routes serve."""
    return str(store_error(exc).body["error"])


def is_api_request() -> bool:
    return flask.request.path.startswith(API_PREFIX)


def handle_http_exception(exc: HTTPException) -> Any:
    """Routing and protocol errors (404, 405, 413, …) as JSON under /api/; other paths
    keep Flask's default so a later dashboard can render its own pages."""
    if not is_api_request():
        return exc
    code = exc.code or 500
    messages = {
        404: "not found",
        405: "method not allowed",
        413: "request body too large",
    }
    resp = error_response(code, messages.get(code, (exc.name or "error").lower()))
    if code == 405:
        # OPTIONS is not served under /api/ (blueprint.refuse_options), so not listed.
        allow = [m.strip() for m in exc.get_response().headers.get("Allow", "").split(",")]
        allow = [m for m in allow if m and m != "OPTIONS"]
        if allow:
            resp.headers["Allow"] = ", ".join(allow)
    return resp


def handle_unexpected(exc: Exception) -> Any:
    """The API blueprints' catch-all. Never a stack trace on the wire: log it, answer a
    bare 500 envelope (HTTP and store errors reaching here keep their own mapping)."""
    if isinstance(exc, HTTPException):
        return handle_http_exception(exc)
    if isinstance(exc, ApiError):
        return exc.response()
    if isinstance(exc, HeadgateError):
        return store_error(exc).response()
    log.exception("unhandled error on %s %s", flask.request.method, flask.request.path)
    return error_response(500, "internal server error")
