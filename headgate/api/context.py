"""Per-app state of the API: the embedding hooks, the producer client built from them,
the background helpers, and the accessors handlers use.

Everything lives in `app.extensions`, never in module globals, so several apps (tests,
an embedding application) can coexist in one process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import flask

import headgate
from headgate.services.client import (
    Authorizer,
    CircuitBreaker,
    Client,
    InsertHook,
    Middleware,
    Plugin,
)
from headgate.services.config import Settings
from headgate.services.duties import OperationsRunner
from headgate.services.live import EventBroadcaster
from headgate.store.port import Store
from headgate.web.globals import get_store
from headgate.worker.remote import RemoteWorkers

from .auth import ANONYMOUS, Caller, TokenSet
from .errors import ApiError

API_KEY = "headgate.api"
log = logging.getLogger("headgate.api")


@dataclass
class ApiHooks:
    """The embedding hooks of `create_app`, handed to the producer Client.

    `identity_from_request(flask.request)` is how the embedding app tells headgate who
    is enqueueing (the identity the authorizer sees); without it the
    identity is the bearer token's (or None when no tokens are configured)."""

    enqueue_authorizer: Authorizer | None = None
    identity_from_request: Callable[[flask.Request], Any] | None = None
    circuit_breaker: CircuitBreaker | None = None
    middleware: Sequence[Middleware] = ()
    insert_hooks: Sequence[InsertHook] = ()
    plugins: Sequence[Plugin] = ()


@dataclass
class ApiState:
    settings: Settings
    hooks: ApiHooks
    tokens: TokenSet
    read_only: bool
    version: str = headgate.__version__
    started_at: float = field(default_factory=time.time)
    started_monotonic: float = field(default_factory=time.monotonic)
    client: Client | None = None
    broadcaster: EventBroadcaster | None = None
    runner: OperationsRunner | None = None
    remote: RemoteWorkers | None = None

    def producer(self, store: Store) -> Client:
        if self.client is None or self.client.store is not store:
            hooks = self.hooks
            kwargs: dict[str, Any] = {
                "middleware": hooks.middleware,
                "insert_hooks": hooks.insert_hooks,
                "plugins": hooks.plugins,
                "circuit_breaker": hooks.circuit_breaker,
            }
            if hooks.enqueue_authorizer is not None:
                kwargs["authorizer"] = hooks.enqueue_authorizer
            self.client = Client(store, **kwargs)
        return self.client

    def embedding_code_enqueues(self) -> bool:
        """Whether an enqueue runs embedding code (authorizer, middleware, hooks,
        plugins): code of unknown duration, which must not run inside a write
        transaction, and whose run a concurrent retry must see as in progress (409).
        A circuit breaker counts too: it watches the producer Client's calls, which
        the enqueue route makes only then (otherwise it calls `Store.enqueue_keyed`)."""
        hooks = self.hooks
        return bool(hooks.enqueue_authorizer is not None or hooks.middleware
                    or hooks.insert_hooks or hooks.plugins
                    or hooks.circuit_breaker is not None)


def api_state(app: flask.Flask | None = None) -> ApiState:
    app = app if app is not None else flask.current_app
    return app.extensions[API_KEY]  # type: ignore[no-any-return]


def store() -> Store:
    return get_store()  # type: ignore[no-any-return]


def producer() -> Client:
    return api_state().producer(store())


def remote_workers(stale_ms: int) -> RemoteWorkers:
    """The sessions of workers on the HTTP worker protocol, on this app's store."""
    state, s = api_state(), store()
    with _REMOTE_LOCK:  # one set of sessions per app: claims of a worker are serialized
        if state.remote is None or state.remote.store is not s:
            state.remote = RemoteWorkers(s, stale_ms=stale_ms,
                                         lease_ms=state.settings.lease_ms)
        return state.remote


_REMOTE_LOCK = threading.Lock()


@contextmanager
def producer_call() -> Iterator[None]:
    """Around a call into the producer Client. The Client and the store raise only
    headgate's typed errors, so anything else came from an embedding hook (middleware,
    insert hook, authorizer, plugin): a server-side plugin failure, not the caller's
    input. It is logged with its trace and answered as a JSON 500 that names it, never
    with the trace or an HTML page."""
    try:
        yield
    except (headgate.HeadgateError, ApiError):
        raise
    except Exception as exc:
        log.exception("enqueue middleware failed on %s %s", flask.request.method,
                      flask.request.path)
        raise ApiError(500, "enqueue middleware failed") from exc


def caller() -> Caller:
    return flask.g.get("headgate_caller") or Caller(ANONYMOUS)


def enqueue_identity() -> Any:
    """Who the enqueue authorizer is told is calling."""
    hook = api_state().hooks.identity_from_request
    if hook is not None:
        return hook(flask.request)
    who = caller()
    return who.identity if who.authenticated else None


def enqueue_context() -> headgate.EnqueueContext:
    return headgate.EnqueueContext(source="http", identity=enqueue_identity())


def idempotency_key() -> str:
    return flask.request.headers.get("Idempotency-Key", "").strip()
