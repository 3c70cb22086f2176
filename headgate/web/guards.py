"""Request checks that apply to the whole app (API and console) before any handler.

- `reject_nul`: no stored name can hold a NUL character (every write refuses one), so a
  URL carrying one — in the path or the query string — can only be a probe or a broken
  client. PostgreSQL cannot even compare a text column with it (the driver raises before
  the query is sent), so without this check such a read was a 500 there and an empty
  answer on SQLite. It is a 400 on both.
- `reject_bad_path_bytes`: a path segment that is not valid UTF-8 is a 400
  `invalid path` (it would otherwise reach a handler as U+FFFD).
- `require_loopback_host` (only when nothing authenticates requests: no API tokens and
  no HG_API_ALLOW_REMOTE, i.e. the default loopback-only server): the Host header must
  name the loopback interface (localhost, *.localhost, 127.0.0.0/8, ::1). Without it, a
  web page the operator visits could rebind its own DNS name to 127.0.0.1 and then use
  the whole unauthenticated API and console as a same-origin page (DNS rebinding). In
  the same mode a WebSocket handshake must come from the page's own origin: browsers
  let any site open a WebSocket to 127.0.0.1 and read what it says (cross-site
  WebSocket hijacking of the live console). With tokens, the console's session cookie
  is SameSite=Strict and a rebound name carries no credentials, so neither check is
  needed; behind HG_API_ALLOW_REMOTE the authenticating proxy owns these checks.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes, urlsplit

import flask

from headgate.services.config import Settings, is_loopback_host

from .errors import error_response
from .segments import MARKED

# Liveness probes may use any name: the answer reveals nothing.
_ANY_HOST_ENDPOINTS = frozenset({"healthz", "api.healthz"})


def _refuse(message: str, status: int = 400) -> flask.Response:
    if flask.request.path.startswith("/api/"):
        return error_response(status, message)
    return flask.Response(message + "\n", status=status, mimetype="text/plain")


def reject_nul() -> flask.Response | None:
    request = flask.request
    # A request whose encoded slashes were marked as NUL had no NUL of its own.
    if "\x00" in request.path and not request.environ.get(MARKED):
        return _refuse("the URL path must not contain NUL")
    for name, value in request.args.items(multi=True):
        if "\x00" in name:
            return _refuse("invalid query string")
        if "\x00" in value:
            return _refuse(f"invalid query parameter `{name}`")
    return None


def reject_bad_path_bytes() -> flask.Response | None:
    """A path whose percent-decoded bytes are not UTF-8 names nothing: Werkzeug would
    decode `%FF` and `%FE` alike as U+FFFD, and `POST /queues/%FF/pause` created a
    queue called "\ufffd". It is a 400 before any route runs."""
    environ = flask.request.environ
    # The request line's own path where the server passes it (gunicorn and Werkzeug
    # do; Werkzeug's PATH_INFO is already decoded with replacement characters), else
    # PATH_INFO, which PEP 3333 servers fill with the decoded bytes as latin-1.
    raw_uri = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    try:
        if raw_uri:
            path = raw_uri.split("?", 1)[0]
            if "://" in path:  # absolute-form request target
                path = urlsplit(path).path
            unquote_to_bytes(path).decode("utf-8")
        else:
            environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8")
    except UnicodeError:
        return _refuse("invalid path")
    return None


def loopback_only(settings: Settings) -> bool:
    """True when only the loopback bind protects the server (see the module docstring)."""
    return not (settings.allow_remote or settings.api_tokens or settings.api_read_tokens
                or settings.api_worker_tokens)


def host_name(host: str) -> str:
    """`name:port`, `[v6]:port` or a bare name/address → the name or address."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host[1:]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback_name(host: str) -> bool:
    name = host_name(host).rstrip(".")
    return is_loopback_host(name) or name.endswith(".localhost")


def require_loopback_host() -> flask.Response | None:
    request = flask.request
    if request.endpoint in _ANY_HOST_ENDPOINTS:
        return None
    host = request.host
    if host and not is_loopback_name(host):
        return _refuse(
            "this server has no API tokens, so it answers only requests addressed to "
            "localhost, 127.0.0.1 or [::1]; set HG_API_TOKENS (or HG_API_ALLOW_REMOTE=1 "
            "behind an authenticating proxy) to serve other host names", 403)
    if request.headers.get("Upgrade", "").lower() == "websocket":
        origin = request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
            return _refuse("cross-origin WebSocket refused", 403)
    return None
