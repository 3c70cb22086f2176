"""Flask application factory.

The store is opened lazily (first request that needs it, or an explicit
``get_store``) so that importing the app — by gunicorn, tests or ``app.py`` — costs no
database connection, and so a forking server opens it in the process that uses it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import flask

from headgate.config import Settings

STORE_KEY = "headgate.store"
SETTINGS_KEY = "headgate.settings"
_LOCK_KEY = "headgate.store_lock"

# Liveness must not depend on the database (SPEC §12), so these skip the lazy open.
_NO_STORE_ENDPOINTS = frozenset({"healthz", "api_healthz", "static"})


def create_app(store: Any = None, *, config: Settings | None = None) -> flask.Flask:
    """Build the app; pass ``store`` to share one already open (tests, in-process use)."""
    settings = config if config is not None else Settings.from_env()
    # Explicit root so headgate/templates and headgate/static are found however the
    # package is installed.
    app = flask.Flask("headgate", root_path=str(Path(__file__).resolve().parent.parent))
    app.extensions[SETTINGS_KEY] = settings
    app.extensions[_LOCK_KEY] = threading.Lock()
    if store is not None:
        app.extensions[STORE_KEY] = store

    @app.before_request
    def _open_store() -> None:
        # Handlers can then read app.extensions["headgate.store"] directly.
        if flask.request.endpoint not in _NO_STORE_ENDPOINTS:
            get_store(app)

    app.add_url_rule("/healthz", "healthz", _healthz)
    app.add_url_rule("/api/v1/healthz", "api_healthz", _healthz)
    return app


def _healthz() -> flask.Response:
    return flask.Response("ok", mimetype="text/plain")


def get_store(app: flask.Flask | None = None) -> Any:
    """The app's store, opening it on first use (once, even under concurrent requests)."""
    app = app if app is not None else flask.current_app
    store = app.extensions.get(STORE_KEY)
    if store is not None:
        return store
    with app.extensions[_LOCK_KEY]:
        store = app.extensions.get(STORE_KEY)
        if store is None:
            import headgate  # deferred: the package root imports the whole store layer

            settings: Settings = app.extensions[SETTINGS_KEY]
            store = headgate.open_store(settings.store_url())
            app.extensions[STORE_KEY] = store
    return store
