"""The operations console: a Flask blueprint of server-rendered pages, HTMX
fragments and one live WebSocket per page.

Reads render straight from the store's bounded read methods (same process, no API
round trip). Every mutation is an HTMX request from the browser to /api/v1 with an
Idempotency-Key, so the console has exactly the powers of any API client and the API's
checks (read-only, tokens, validation) apply to it unchanged.

Mount it with ``init_app(app)``; ``url_prefix`` (or ``HG_UI_PREFIX``) mounts it under a
path, e.g. ``/console``. The API stays at /api/v1 either way.
"""

from __future__ import annotations

import os

import flask

from . import live  # registers the /live socket on the views' blueprint
from .auth import ConsoleSessionAuth, configure_secret
from .views import bp

PREFIX_ENV = "HG_UI_PREFIX"
_INSTALLED = "headgate.dashboard"


def init_app(app: flask.Flask, url_prefix: str | None = None) -> None:
    """Register the console on `app` (idempotent)."""
    if _INSTALLED in app.extensions:
        return
    prefix = url_prefix if url_prefix is not None else os.environ.get(PREFIX_ENV, "")
    prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
    configure_secret(app)
    # Live sockets: ping so proxies keep idle sockets open and dead peers are noticed.
    app.config.setdefault("SOCK_SERVER_OPTIONS", {"ping_interval": 25})
    app.register_blueprint(bp, url_prefix=prefix or None)
    app.wsgi_app = ConsoleSessionAuth(app.wsgi_app, app)  # type: ignore[method-assign]
    app.extensions[_INSTALLED] = {"url_prefix": prefix}


def on_stopping(app: flask.Flask) -> None:
    """The server is stopping: close the open pages' live sockets (they reconnect to
    the next server)."""
    live.close_sockets(app)


def shutdown(app: flask.Flask, timeout: float = 5.0) -> bool:
    """Stop the console's threads: close the live sockets (as `on_stopping`) and wait,
    up to `timeout`, for the live hub's thread and the sockets' readers to end; whether
    they did. For an app shut down in a process that goes on (an embedding app, tests):
    a stopping server's process exits anyway."""
    return live.stop(app, timeout)


__all__ = ["bp", "init_app", "on_stopping", "shutdown"]
