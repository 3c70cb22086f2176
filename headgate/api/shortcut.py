"""`POST /api/v1/jobs` answered beneath Flask, for the plain request.

A producer's enqueue is the API's hot call, and through Flask's request machinery
(contexts, routing, a dozen hooks, the response object) it cost about twice the
store's own work. This WSGI layer, innermost around the app, answers the plain case
itself: the same checks, the same one-transaction write (`Store.enqueue_keyed`), the
same answer and stored replay, byte for byte, and the same latency metric.

Anything else goes to the full route untouched, and it writes nothing before it is sure,
so handing over is always safe: a request with a query string, another content type,
no or a too long Idempotency-Key, a caller-chosen unique key, a refused body (the route
answers as the key says first), a token that is missing, wrong, read-only or a worker's,
a throttled address, a Host the loopback guard would refuse, read-only mode, embedding
hooks, a key already used or joining its job (nothing was written; the route replays).
It also stands aside while the app differs from what `arm` saw (a hook, view or
signal receiver added since, as an embedding application or an instrumentation
library adds them) and in debug mode. A store error is answered here, as the route
would: retrying it through the route would double an outage's wait.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import flask
from flask import signals
from flask.json.provider import DefaultJSONProvider
from werkzeug.http import parse_options_header

from headgate.core import HeadgateError
from headgate.core.errors import Duplicate
from headgate.web import auth_throttle, guards
from headgate.web.globals import get_store

from . import idempotency
from .auth import ANONYMOUS, Caller, bearer_caller
from .context import api_state
from .errors import ApiError, store_error
from .jobs import ENQUEUE_FIELDS, enqueue_envelope
from .metrics import METRICS_KEY, Metrics
from .params import parse_json_bytes, read_fields

log = logging.getLogger("headgate.api")

PATH = "/api/v1/jobs"
ENDPOINT = "api.enqueue"
_SHORTCUT_KEY = "headgate.api.shortcut"
_SIGNALS = (signals.request_started, signals.request_finished,
            signals.got_request_exception, signals.request_tearing_down,
            signals.appcontext_pushed, signals.appcontext_popped,
            signals.appcontext_tearing_down)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def install(app: flask.Flask) -> None:
    """Wrap the app's WSGI callable (innermost: every layer wrapped later, such as the
    trusted-proxy fix, runs before it). It serves nothing until `arm`."""
    shortcut = EnqueueShortcut(app, app.wsgi_app)
    app.extensions[_SHORTCUT_KEY] = shortcut
    app.wsgi_app = shortcut  # type: ignore[method-assign]


def arm(app: flask.Flask) -> None:
    """The app is complete: record its hooks, view and signal receivers as they are."""
    shortcut: EnqueueShortcut | None = app.extensions.get(_SHORTCUT_KEY)
    if shortcut is not None:
        shortcut.armed = shortcut.shape()


class EnqueueShortcut:
    def __init__(self, app: flask.Flask, inner: WsgiApp) -> None:
        self.app = app
        self.inner = inner
        self.armed: tuple[Any, ...] | None = None

    def shape(self) -> tuple[Any, ...] | None:
        """What the full route's outcome depends on beyond this module's checks; None
        when the app's configuration rules the shortcut out altogether."""
        app = self.app
        config = app.config
        # A provider of the embedding's own may answer in its own way (response()).
        if (app.debug or config.get("SERVER_NAME") or config.get("TRUSTED_HOSTS")
                or type(app.json) is not DefaultJSONProvider or app.json.compact is False):
            return None
        hooks = (app.before_request_funcs, app.after_request_funcs,
                 app.teardown_request_funcs, app.url_value_preprocessors)
        return (
            tuple(tuple((k, tuple(v)) for k, v in h.items()) for h in hooks),
            tuple(app.teardown_appcontext_funcs),
            app.view_functions.get(ENDPOINT),
            tuple(len(s.receivers) for s in _SIGNALS),
        )

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        if (environ.get("PATH_INFO") == PATH and environ.get("REQUEST_METHOD") == "POST"
                and self.armed is not None):
            answer = self._try(environ)
            if answer is not None:
                status, headers, body = answer
                start_response(status, headers)
                return [body]
        return self.inner(environ, start_response)

    def _try(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes] | None:
        started = time.perf_counter()
        if self.armed != self.shape():
            return None
        try:
            request = self._body(environ)
            if request is None:
                return None
            return self._enqueue(environ, *request, started)
        except Exception:  # noqa: BLE001 - the full route answers (and reports) it
            log.exception("the enqueue shortcut failed; the full route answers")
            return None

    def _body(self, environ: dict[str, Any]) -> tuple[str, bytes] | None:
        """The request's Idempotency-Key and body when the request is one this module
        answers."""
        state = api_state(self.app)
        if (environ.get("QUERY_STRING") or state.read_only
                or state.embedding_code_enqueues()
                or environ.get("HTTP_TRANSFER_ENCODING") or environ.get("HTTP_UPGRADE")):
            return None
        if parse_options_header(environ.get("CONTENT_TYPE", ""))[0] != "application/json":
            return None
        key = environ.get("HTTP_IDEMPOTENCY_KEY", "").strip()
        if not key or len(key) > idempotency.MAX_KEY_LENGTH:
            return None
        if guards.loopback_only(state.settings) and not guards.is_loopback_name(
                environ.get("HTTP_HOST", "")):
            return None
        length = environ.get("CONTENT_LENGTH", "")
        if not length.isdigit() or int(length) > (self.app.config["MAX_CONTENT_LENGTH"] or 0):
            return None
        raw = environ["wsgi.input"].read(int(length))
        # Whatever happens next, the full route can still read the body.
        environ["wsgi.input"] = io.BytesIO(raw)
        environ.pop("wsgi.input_terminated", None)
        return (key, raw) if len(raw) == int(length) else None

    def _caller(self, environ: dict[str, Any]) -> Caller | None:
        """The caller when its token lets it enqueue; None for the route to answer."""
        tokens = api_state(self.app).tokens
        if not tokens.enabled:
            return Caller(ANONYMOUS)
        header = environ.get("HTTP_AUTHORIZATION", "")
        counter = auth_throttle.counter(self.app)
        if not header or (counter is not None and counter.retry_after(
                environ.get("REMOTE_ADDR") or "unknown")):
            return None
        who = bearer_caller(tokens, header)
        return None if who is None or who.worker or who.read_only else who

    def _enqueue(self, environ: dict[str, Any], key: str, raw: bytes, started: float
                 ) -> tuple[str, list[tuple[str, str]], bytes] | None:
        who = self._caller(environ)
        if who is None:
            return None
        try:
            fields = read_fields(parse_json_bytes(raw), ENQUEUE_FIELDS)
            if fields["unique_key"] is not None:
                return None
            env, _ = enqueue_envelope(fields, key, who)
            env = env.validated()
        except (ApiError, HeadgateError):
            return None
        app = self.app
        provider = cast(DefaultJSONProvider, app.json)  # as shape() requires
        # As the provider's response() writes it outside debug mode.
        body = (provider.dumps({"id": env.id}, separators=(",", ":")) + "\n").encode()
        answer = (201, {"Content-Type": provider.mimetype}, body)
        scope = idempotency.scope_of(who.identity, "POST", PATH, "", key)
        try:
            done = get_store(app).enqueue_keyed(
                scope, idempotency.hash_of("application/json", raw), env, answer, _no_replay)
        except HeadgateError as exc:
            return self._error(environ, exc, started)
        if not done.ids:  # the key's record, or its job held the key: nothing written
            return None
        self._observe(201, started)
        return "201 CREATED", [("Content-Type", provider.mimetype),
                               ("Content-Length", str(len(body)))], body

    def _error(self, environ: dict[str, Any], exc: HeadgateError, started: float
               ) -> tuple[str, list[tuple[str, str]], bytes]:
        with self.app.request_context(environ):
            resp = store_error(exc).response()
        self._observe(resp.status_code, started)
        return resp.status, resp.headers.to_wsgi_list(), resp.get_data()

    def _observe(self, status: int, started: float) -> None:
        metrics: Metrics = self.app.extensions[METRICS_KEY]
        metrics.observe("POST", ENDPOINT, status, started)


def _no_replay(_dup: Duplicate) -> None:
    """Store no replay for a key joining its job: the full route does that."""
    return None
