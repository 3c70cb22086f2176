"""The `/api/v1` blueprint and the checks every request passes before its handler.

Order (outermost first): authentication, a worker token's scope, read-only mode,
Idempotency-Key. Only requests that reach a route of this blueprint pass here; unknown
paths and methods are answered by the app-level JSON 404/405 handlers.
"""

from __future__ import annotations

from typing import Any

import flask
from werkzeug.exceptions import MethodNotAllowed, NotFound

from headgate.core import HeadgateError

from . import idempotency
from .auth import authenticate
from .context import api_state
from .errors import ApiError, handle_unexpected, store_error

bp = flask.Blueprint("api", __name__, url_prefix="/api/v1")


def api_path_checks() -> None:
    """Every answer under `/api/` is JSON or empty, and the app's routing would give two
    that are not: a doubled slash (`/api/v1//jobs`) is merged by Werkzeug into a 308
    with an HTML body, handed out before any error handler sees it, and OPTIONS is
    answered 200 for every route. Here an empty segment matches nothing (404: no route
    has an empty name) and OPTIONS is a 405 naming the path's methods (no route serves
    OPTIONS; nothing cross-origin is granted)."""
    request = flask.request
    if not request.path.startswith("/api/"):
        return
    if "//" in request.path:
        raise NotFound()
    if request.method != "OPTIONS" or request.url_rule is None:
        return
    adapter = flask.current_app.url_map.bind_to_environ(request.environ)
    methods = set(adapter.allowed_methods(request.path)) - {"OPTIONS"}
    raise MethodNotAllowed(valid_methods=sorted(methods))


# Liveness answers without credentials: it reveals nothing and probes carry none.
UNAUTHENTICATED_ENDPOINTS = frozenset({"api.healthz"})
# POSTs that are reads (a body too rich for a query string, nothing changed): no
# Idempotency-Key, allowed read-only, not audited.
READ_POSTS = frozenset({"api.simulate"})
# What a worker token may call (worker_protocol.py): its own side of the queue, never
# a listing, a payload outside its claims or an operator action.
WORKER_ENDPOINTS = frozenset({
    "api.register_worker", "api.worker_heartbeat", "api.claim_jobs", "api.extend_lease",
    "api.complete_job", "api.fail_job", "api.snooze_job", "api.report_progress",
    "api.deregister_worker",
})


@bp.before_request
def _guard() -> flask.Response | None:
    request = flask.request
    if request.endpoint in UNAUTHENTICATED_ENDPOINTS:
        return None
    state = api_state()
    who = authenticate(state.tokens)
    flask.g.headgate_caller = who
    if who.worker and request.endpoint not in WORKER_ENDPOINTS:
        raise ApiError(403, "worker token")
    if request.endpoint in READ_POSTS:
        return None
    if request.method != "GET":
        # The enforcement: a UI only mirrors it by disabling its buttons.
        if state.read_only:
            raise ApiError(403, "read-only mode")
        if who.read_only:
            raise ApiError(403, "read-only token")
    if request.method in idempotency.MUTATING:
        return idempotency.before_mutation()
    return None


bp.after_request(idempotency.after_request)
bp.teardown_request(idempotency.teardown)


@bp.errorhandler(ApiError)
def _api_error(exc: ApiError) -> flask.Response:
    return exc.response()


@bp.errorhandler(HeadgateError)
def _store_error(exc: HeadgateError) -> flask.Response:
    return store_error(exc).response()


# Anything else (a bug, a broken embedding hook): logged, answered with a bare JSON 500 —
# never a stack trace or an HTML page.
bp.register_error_handler(Exception, handle_unexpected)


def bare(resp: flask.Response) -> flask.Response:
    """Drop the Content-Type Werkzeug gives every response: an empty answer carries
    none, and `text/html` would claim a body that is not there."""
    del resp.headers["Content-Type"]
    return resp


def no_content(headers: dict[str, str] | None = None) -> flask.Response:
    resp = bare(flask.Response(status=204))
    for key, value in (headers or {}).items():
        resp.headers[key] = value
    return resp


def empty_ok() -> flask.Response:
    """A bare OK (PUT routes): 200 with an empty body."""
    return bare(flask.Response(b"", status=200))


def json_response(body: Any, status: int = 200) -> flask.Response:
    resp = flask.jsonify(body)
    resp.status_code = status
    return resp
