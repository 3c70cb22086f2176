"""Flask application factory: the one module that assembles the guards, the API and
the console. Those reach the store through `web/globals.py` (opened lazily, on first
use), never through this module, so nothing imports it but the package and the CLI.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import flask

from headgate import api, dashboard
from headgate.services.config import Settings

from . import guards, proxies
from .globals import (
    LOCK_KEY,
    ON_STOPPING_KEY,
    ON_STORE_READY_KEY,
    SETTINGS_KEY,
    STORE_KEY,
    get_store,
)

if TYPE_CHECKING:
    from headgate.services.client import Authorizer, CircuitBreaker, InsertHook, Middleware, Plugin

__all__ = ["STORE_KEY", "create_app", "get_store"]

# Liveness must not depend on the database (a down database is readiness's business,
# not a reason to restart the server), so these skip the lazy open.
_NO_STORE_ENDPOINTS = frozenset({"healthz", "api.healthz", "api.openapi", "static"})


def create_app(
    store: Any = None,
    *,
    config: Settings | None = None,
    enqueue_authorizer: Authorizer | None = None,
    identity_from_request: Callable[[flask.Request], Any] | None = None,
    circuit_breaker: CircuitBreaker | None = None,
    middleware: Sequence[Middleware] = (),
    insert_hooks: Sequence[InsertHook] = (),
    plugins: Sequence[Plugin] = (),
    background: bool = True,
) -> flask.Flask:
    """Build the app; pass ``store`` to share one already open (tests, in-process use).

    The keyword hooks are the embedding hooks (docs/api.md, Access), handed to the producer
    Client behind HTTP enqueues: a per-kind enqueue authorizer (told the identity that
    ``identity_from_request(flask.request)`` returns), a circuit breaker, middleware,
    insert hooks and plugins. ``background=False`` leaves bulk operations to an
    external duty runner calling ``store.run_operations_batch()``."""
    settings = config if config is not None else Settings.from_env()
    # Explicit root so headgate/templates and headgate/static are found however the
    # package is installed.
    app = flask.Flask("headgate", root_path=str(Path(__file__).resolve().parent.parent))
    app.extensions[SETTINGS_KEY] = settings
    app.extensions[LOCK_KEY] = threading.Lock()
    app.extensions[ON_STORE_READY_KEY] = [api.on_store_ready]
    app.extensions[ON_STOPPING_KEY] = [api.on_stopping, dashboard.on_stopping]
    if store is not None:
        app.extensions[STORE_KEY] = store
    hooks = api.ApiHooks(
        enqueue_authorizer=enqueue_authorizer,
        identity_from_request=identity_from_request,
        circuit_breaker=circuit_breaker,
        middleware=middleware,
        insert_hooks=insert_hooks,
        plugins=plugins,
    )
    # First of all checks: a URL no handler should ever see (see guards.py).
    app.before_request(guards.reject_nul)
    app.before_request(guards.reject_bad_path_bytes)
    if guards.loopback_only(settings):
        app.before_request(guards.require_loopback_host)
    api.init_app(app, settings, hooks, background=background)
    if settings.trusted_proxies:
        # Outermost: every check after it sees the client's address, not the proxy's.
        app.wsgi_app = proxies.trust_proxies(  # type: ignore[method-assign]
            app.wsgi_app, settings.trusted_proxies)
    # The operations console at / (HG_UI_PREFIX mounts it under a path instead).
    dashboard.init_app(app)

    @app.before_request
    def _open_store() -> None:
        # Handlers can then read app.extensions["headgate.store"] directly.
        if flask.request.endpoint not in _NO_STORE_ENDPOINTS:
            get_store(app)

    # /api/v1/healthz is the API blueprint's own route.
    app.add_url_rule("/healthz", "healthz", _healthz)
    # Last: the shortcut serves only while the app stays as assembled here.
    api.arm_enqueue_shortcut(app)
    return app


def _healthz() -> flask.Response:
    return flask.Response("ok", mimetype="text/plain")

