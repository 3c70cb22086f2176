"""The app-wide handles the API and the console read: the store and the settings.

A leaf (as Flask's `globals`): it imports neither the API nor the console, so both
reach the store through it while `web/app.py`, the one module that imports them,
assembles the app.

The store is opened lazily (first request that needs it, or an explicit
``get_store``) so that importing the app — by gunicorn, tests or ``app.py`` — costs no
database connection, and so a forking server opens it in the process that uses it.
"""

from __future__ import annotations

from typing import Any

import flask

from headgate.services.config import Settings
from headgate.store import open_store

STORE_KEY = "headgate.store"
SETTINGS_KEY = "headgate.settings"
# Callables `(app, store)` run once, when the store is first available (e.g. the API's
# event broadcaster and operations runner start there, not at import).
ON_STORE_READY_KEY = "headgate.on_store_ready"
LOCK_KEY = "headgate.store_lock"
READY_KEY = "headgate.store_ready"
# Callables `(app)` run when the server hosting the app begins to stop. Responses that
# never end by themselves (the console's live sockets, the API's event streams) end
# there, so the server's graceful wait is spent on requests that finish, not on them.
ON_STOPPING_KEY = "headgate.on_stopping"


def get_store(app: flask.Flask | None = None) -> Any:
    """The app's store, opening it on first use (once, even under concurrent requests)."""
    app = app if app is not None else flask.current_app
    store = app.extensions.get(STORE_KEY)
    if store is not None and app.extensions.get(READY_KEY):
        return store
    with app.extensions[LOCK_KEY]:
        store = app.extensions.get(STORE_KEY)
        if store is None:
            settings: Settings = app.extensions[SETTINGS_KEY]
            store = open_store(settings.store_url(), **settings.store_options())
            app.extensions[STORE_KEY] = store
        if not app.extensions.get(READY_KEY):
            app.extensions[READY_KEY] = True
            for hook in app.extensions.get(ON_STORE_READY_KEY, ()):
                hook(app, store)
    return store


def begin_stopping(app: flask.Flask) -> None:
    """The hosting server is stopping: end the app's long-lived responses. Safe to call
    more than once, and from any thread (not from a signal handler: a hook may wait)."""
    for hook in app.extensions.get(ON_STOPPING_KEY, ()):
        hook(app)
