"""Who is calling: bearer API tokens (docs/api.md, Access) and read-only enforcement.

Tokens come from Settings (HG_API_TOKENS, HG_API_READ_TOKENS, HG_API_WORKER_TOKENS,
HG_API_TOKENS_FILE). A worker token reaches the worker protocol only (blueprint.py),
optionally for named queues, so a worker host holds no operator's credential.
When any is configured, every /api/v1 route except healthz needs one — in the
Authorization header only: a token in a query string ends up in access logs, proxy
logs and browser history, so one sent that way is refused outright rather than ignored.
Comparison is constant-time and runs over every configured token, so neither timing
nor early exit tells a caller how close a guess was. Only a SHA-256 prefix of a token
is ever kept beyond the comparison (as the caller's identity).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

import flask

from headgate.services.config import Settings
from headgate.web import auth_throttle

from .errors import ApiError

# Query parameters that look like credentials; refused when tokens are configured.
QUERY_TOKEN_NAMES = ("access_token", "token", "api_token", "api_key", "bearer")
ANONYMOUS = "anonymous"
# Who the audit log names when no tokens are configured: the loopback-only server's
# own machine, or (HG_API_ALLOW_REMOTE=1) whoever an upstream layer let through.
LOCAL_NAME = "local"


def token_name(token: bytes) -> str:
    """A token's name when the tokens file gives none: a short, stable fingerprint of
    its hash, which names it in the audit log without revealing it."""
    return "token:" + hashlib.sha256(token).hexdigest()[:6]


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated caller. `identity` scopes idempotency keys and is the default
    enqueue identity; `read_only` callers may only GET; `worker` callers may only use
    the worker protocol, for `queues` when those are given."""

    identity: str
    read_only: bool = False
    authenticated: bool = False
    worker: bool = False
    queues: frozenset[str] | None = field(default=None, compare=False)
    # Whom the audit log names: the tokens file's `name=`, else token_name(). Not part
    # of equality: `identity` says who the caller is.
    name: str = field(default=LOCAL_NAME, compare=False)


@dataclass(frozen=True)
class TokenSet:
    full: tuple[bytes, ...] = ()
    read_only: tuple[bytes, ...] = ()
    names: tuple[tuple[bytes, str], ...] = ()
    worker: tuple[bytes, ...] = ()
    worker_queues: tuple[tuple[bytes, tuple[str, ...]], ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenSet:
        return cls(
            tuple(t.encode() for t in settings.api_tokens),
            tuple(t.encode() for t in getattr(settings, "api_read_tokens", ())),
            tuple((t.encode(), n) for t, n in getattr(settings, "api_token_names", ())),
            tuple(t.encode() for t in getattr(settings, "api_worker_tokens", ())),
            tuple((t.encode(), q) for t, q in getattr(settings, "api_worker_queues", ())),
        )

    def name_of(self, token: bytes) -> str:
        """A configured token's name, looked up once the constant-time match found it."""
        return dict(self.names).get(token) or token_name(token)

    @property
    def enabled(self) -> bool:
        return bool(self.full or self.read_only or self.worker)

    def match(self, presented: str) -> Caller | None:
        candidate = presented.encode("utf-8", "surrogateescape")
        found: Caller | None = None
        # No early exit: every configured token is compared.
        for mode, tokens in (("rw", self.full), ("ro", self.read_only),
                             ("worker", self.worker)):
            for token in tokens:
                if hmac.compare_digest(candidate, token) and found is None:
                    digest = hashlib.sha256(token).hexdigest()[:16]
                    queues = dict(self.worker_queues).get(token) if mode == "worker" else None
                    found = Caller(f"token:{digest}", read_only=mode == "ro",
                                   authenticated=True, name=self.name_of(token),
                                   worker=mode == "worker",
                                   queues=None if queues is None else frozenset(queues))
        return found


def bearer_caller(tokens: TokenSet, header: str) -> Caller | None:
    """The caller an Authorization header's bearer token names, if any."""
    scheme, _, value = header.partition(" ")
    return tokens.match(value.strip()) if scheme.lower() == "bearer" else None


def authenticate(tokens: TokenSet) -> Caller:
    """The caller of the current request, or ApiError 401."""
    if not tokens.enabled:
        return Caller(ANONYMOUS)
    request = flask.request
    challenge = {"WWW-Authenticate": 'Bearer realm="headgate"'}
    if any(name in request.args for name in QUERY_TOKEN_NAMES):
        raise ApiError(401, "API tokens are not accepted in query strings; "
                            "send Authorization: Bearer <token>", headers=challenge)
    header = request.headers.get("Authorization", "")
    if not header:
        raise ApiError(401, "missing bearer token", headers=challenge)
    if wait := auth_throttle.wait_s():
        raise ApiError(429, f"too many failed token attempts; retry in {wait} s",
                       headers={"Retry-After": str(wait)})
    caller = bearer_caller(tokens, header)
    if caller is None:
        auth_throttle.record_failure()
        raise ApiError(401, "invalid bearer token", headers=challenge)
    return caller
