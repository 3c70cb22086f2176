"""The control API (docs/api.md): a Flask blueprint at `/api/v1`, plus `/metrics` and
`/readyz` at the top level.

Modules follow the API's seams: `errors` (envelope, store-error mapping), `params`
(body/query parsing with normalized rejections), `auth` (tokens, read-only),
`idempotency` (Idempotency-Key storage and replay), then the route groups — `jobs`,
`queues`, `policy`, `workers`, `periodic`, `operations` (bulk), `events`
(SSE), `system`, `openapi` — and `metrics`.
"""

from __future__ import annotations

import flask
from werkzeug.exceptions import HTTPException

from headgate.core.clock import wall_ms
from headgate.services.config import Settings
from headgate.services.duties import OperationsRunner
from headgate.services.live import EventBroadcaster, ForeignChanges
from headgate.store.port import Store
from headgate.web import auth_throttle
from headgate.web.globals import get_store
from headgate.web.segments import Segment, keep_encoded_slashes

# Route modules register on the blueprint when imported.
from . import (  # noqa: F401
    audit,
    events,
    forecast,
    jobs,
    openapi,
    operations,
    periodic,
    policy,
    queues,
    shortcut,
    system,
    worker_protocol,
    workers,
)
from .auth import TokenSet
from .blueprint import api_path_checks, bp
from .context import API_KEY, ApiHooks, ApiState, api_state
from .errors import handle_http_exception
from .metrics import METRICS_KEY, Metrics, ops_bp

# A 1 MiB payload is ~1.4 MB of base64; the rest of an envelope fits in the margin.
MAX_CONTENT_LENGTH = 2 * 1024 * 1024 + 256 * 1024

__all__ = ["ApiHooks", "MAX_CONTENT_LENGTH", "arm_enqueue_shortcut", "bp", "init_app",
           "on_stopping", "on_store_ready", "shutdown"]

arm_enqueue_shortcut = shortcut.arm


def init_app(app: flask.Flask, settings: Settings, hooks: ApiHooks | None = None, *,
             background: bool = True) -> None:
    """Mount the API on `app`. `background=False` skips the operations runner thread
    (for an embedding app whose duty runner calls `store.run_operations_batch`)."""
    state = ApiState(
        settings=settings,
        hooks=hooks or ApiHooks(),
        tokens=TokenSet.from_settings(settings),
        read_only=settings.read_only,
    )
    app.extensions[API_KEY] = state
    auth_throttle.install(app, settings.auth_failures_per_minute)
    app.extensions["headgate.api.background"] = background
    if app.config.get("MAX_CONTENT_LENGTH") is None:  # Flask's default is unlimited
        app.config["MAX_CONTENT_LENGTH"] = MAX_CONTENT_LENGTH
    # Names holding `/` are one path segment when sent as `%2F` (headgate/web/segments.py).
    app.url_map.converters["segment"] = Segment
    app.url_map.converters["job_id"] = jobs.JobId
    shortcut.install(app)  # innermost: armed once the app is complete
    app.wsgi_app = keep_encoded_slashes(app.wsgi_app)  # type: ignore[method-assign]
    # Every answer under /api/ is JSON or empty: no slash-merging redirect, no OPTIONS.
    app.before_request(api_path_checks)
    app.register_blueprint(bp)
    app.register_blueprint(ops_bp)
    # App-wide only for routing errors (404/405/413 under /api/ become JSON; other paths
    # keep Flask's pages). Unexpected exceptions are caught by the API's own blueprints,
    # so the dashboard's errors still propagate the way Flask normally handles them.
    app.register_error_handler(HTTPException, handle_http_exception)

    metrics = app.extensions[METRICS_KEY] = Metrics(lambda: get_store(app), wall_ms())
    app.before_request(metrics.before_request)
    app.after_request(metrics.after_request)


def on_store_ready(app: flask.Flask, store: Store) -> None:
    """Start the services that need the store: the SSE broadcaster and the operations
    runner (headgate/services/live.py, headgate/services/duties.py)."""
    state = api_state(app)
    if state.broadcaster is None:
        # SQLite's signal hears only this process: the broadcaster also watches the
        # store for commits of workers and producers elsewhere.
        state.broadcaster = EventBroadcaster(store.activity, foreign=ForeignChanges(store))
    if state.runner is None and app.extensions.get("headgate.api.background", True):
        state.runner = OperationsRunner(store)
        state.runner.start()


def on_stopping(app: flask.Flask) -> None:
    """The server is stopping: end the open event streams (clients reconnect with their
    Last-Event-ID to the next server)."""
    state = app.extensions.get(API_KEY)
    if state is not None and state.broadcaster is not None:
        state.broadcaster.stop()


def shutdown(app: flask.Flask) -> None:
    """Stop the API's threads (before the store is closed)."""
    state = app.extensions.get(API_KEY)
    if state is None:
        return
    if state.runner is not None:
        state.runner.stop()
        state.runner = None
    if state.broadcaster is not None:
        state.broadcaster.stop()
        state.broadcaster = None
