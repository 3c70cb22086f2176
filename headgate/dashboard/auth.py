"""Console sign-in, CSRF, and the hook that lets the console's own /api/v1 calls carry
the signed-in operator's token without the token ever reaching a URL or the page.

How it fits together, when API tokens are configured (HG_API_TOKENS):

1. The operator posts a token to the sign-in form. It is checked against the
   configured tokens, and the Flask session (a signed, HttpOnly, SameSite=Strict
   cookie) records which one by its SHA-256 — never the token itself: Flask's session
   cookie is signed, not encrypted, so anything in it can be read by whoever holds the
   cookie (or a proxy that logs cookies). Page scripts cannot read the cookie, and no
   token ever appears in a URL.
2. Every page carries a per-session CSRF value in a `<meta>` tag. headgate.js sends it
   as `X-Headgate-CSRF` on every request the page makes.
3. ``ConsoleSessionAuth`` (WSGI middleware installed by ``init_app``) sees a request to
   /api/v1 that has no Authorization header but has a session cookie and a matching
   X-Headgate-CSRF header, and adds `Authorization: Bearer <that token>` before the
   request reaches Flask. The API's own token check then runs unchanged: the console
   gets no privileged path, it acts exactly as that token would.

Why this is CSRF-safe: a cross-site page can make the browser send our cookie (only on
top-level GET navigations, given SameSite=Strict — not even that for POSTs), but it can
neither read the CSRF value nor set custom headers (X-Headgate-CSRF, Idempotency-Key) on
a cross-origin request without a CORS preflight, which this server never grants. Every
mutating /api/v1 route also requires Idempotency-Key, so even with no tokens configured
(loopback mode) a forged HTML form post is rejected with 400. The sign-in and sign-out
forms themselves are plain form posts and check the CSRF value explicitly.

This is the "small documented hook" used until/unless the API grows its own session
support; it edits no API code and is a no-op when no tokens are configured.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import flask
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface

from headgate.api.auth import Caller, TokenSet
from headgate.services.config import Settings

SESSION_TOKEN = "hg_token"
SESSION_CSRF = "hg_csrf"
CSRF_HEADER = "X-Headgate-CSRF"
_CSRF_ENVIRON = "HTTP_X_HEADGATE_CSRF"
SECRET_ENV = "HG_SECRET_KEY"


def settings() -> Settings:
    return flask.current_app.extensions["headgate.settings"]


def token_set(s: Settings | None = None) -> TokenSet:
    """The API's own token set (full and read-only tokens), so the console accepts
    exactly the tokens the API does, with the same constant-time comparison."""
    return TokenSet.from_settings(s if s is not None else settings())


def tokens_required(s: Settings | None = None) -> bool:
    return token_set(s).enabled


def caller_for(token: str | None, s: Settings | None = None) -> Caller | None:
    """Who a console token signs in as; None for an unknown token and for a worker
    token, which reaches the worker protocol and nothing the console shows."""
    if not token or not isinstance(token, str):
        return None
    caller = token_set(s).match(token)
    return None if caller is None or caller.worker else caller


def token_ref(token: str) -> str:
    """What the session keeps instead of the token."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def token_for_ref(ref: Any, s: Settings | None = None) -> str | None:
    """The configured token a session's reference names (compared in constant time,
    over every configured token); None once that token is no longer configured."""
    if not isinstance(ref, str) or not ref.startswith("sha256:"):
        return None
    settings_ = s if s is not None else settings()
    found = None
    for token in (*settings_.api_tokens, *settings_.api_read_tokens):
        if hmac.compare_digest(token_ref(token), ref) and found is None:
            found = token
    return found


def session_caller() -> Caller | None:
    """Who the console session acts as; None when signed out. Re-checked on every
    request, so removing a token from the configuration signs its sessions out."""
    return caller_for(token_for_ref(flask.session.get(SESSION_TOKEN)))


def signed_in() -> bool:
    return not tokens_required() or session_caller() is not None


def session_read_only() -> bool:
    """A read-only token makes the whole console read-only for that session."""
    caller = session_caller() if tokens_required() else None
    return bool(caller and caller.read_only)


def csrf_token() -> str:
    value = flask.session.get(SESSION_CSRF)
    if not value:
        value = secrets.token_urlsafe(32)
        flask.session[SESSION_CSRF] = value
    return value


def csrf_ok(value: str | None) -> bool:
    expected = flask.session.get(SESSION_CSRF)
    return bool(expected and value and hmac.compare_digest(expected, value))


def safe_next(target: str | None, default: str) -> str:
    """Only same-site relative paths: an open redirect after sign-in would be phishing."""
    if not target:
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return default
    return target


class CookieFirstSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, except that a request without the session cookie
    (every producer's API call) gets its empty session without the signing serializer
    that the parent builds before looking for the cookie (~35 µs a request)."""

    def open_session(self, app: flask.Flask, request: flask.Request) -> SecureCookieSession | None:
        if app.secret_key and not request.cookies.get(self.get_cookie_name(app)):
            return self.session_class()
        return super().open_session(app, request)


def configure_secret(app: flask.Flask) -> None:
    """The session signing key: HG_SECRET_KEY when set (sessions survive restarts and
    are shared by several server processes), otherwise a random per-process key."""
    if not app.secret_key:
        app.secret_key = os.environ.get(SECRET_ENV) or secrets.token_hex(32)
    app.config.setdefault("SESSION_COOKIE_HTTPONLY", True)
    app.config["SESSION_COOKIE_SAMESITE"] = "Strict"
    s: Settings | None = app.extensions.get("headgate.settings")
    if s is not None and s.cookie_secure:
        app.config["SESSION_COOKIE_SECURE"] = True
    if app.config.get("SESSION_COOKIE_NAME", "session") == "session":
        app.config["SESSION_COOKIE_NAME"] = "headgate_session"
    app.session_interface = CookieFirstSessions()


class ConsoleSessionAuth:
    """WSGI middleware: turn a console session into the Authorization header the API
    checks (see the module docstring). Only for /api/v1, only with the CSRF header."""

    def __init__(self, wsgi_app: Callable[..., Any], app: flask.Flask) -> None:
        self.wsgi_app = wsgi_app
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if (
            environ.get("PATH_INFO", "").startswith("/api/v1/")
            and "HTTP_AUTHORIZATION" not in environ
            and environ.get(_CSRF_ENVIRON)
        ):
            token = self._token_for(environ)
            if token:
                environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        return self.wsgi_app(environ, start_response)

    def _token_for(self, environ: dict[str, Any]) -> str | None:
        s: Settings = self.app.extensions["headgate.settings"]
        if not tokens_required(s):
            return None
        try:
            request = flask.Request(environ)
            session = self.app.session_interface.open_session(self.app, request)
        except Exception:  # noqa: BLE001 - a bad cookie just means "not signed in"
            return None
        if session is None:
            return None
        expected = session.get(SESSION_CSRF)
        given = environ.get(_CSRF_ENVIRON, "")
        if not expected or not hmac.compare_digest(str(expected), given):
            return None
        token = token_for_ref(session.get(SESSION_TOKEN), s)
        return token if caller_for(token, s) is not None else None
