"""The producer client (docs/ARCHITECTURE.md, Producing jobs): validation, authorization,
middleware, hooks, plugins and an optional circuit breaker around the store's
all-or-nothing enqueue."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from headgate.core import CircuitOpen, EnqueueForbidden, Envelope, StoreUnavailable
from headgate.store.port import Producer


@dataclass(frozen=True, slots=True)
class EnqueueContext:
    """Who is enqueueing: `source` is client | http | periodic; `identity` is whatever the
    embedding application authenticated (None when nobody did)."""

    source: str = "client"
    identity: Any = None


# Frozen, so one instance serves every call that names no context.
DEFAULT_CONTEXT = EnqueueContext()

Authorizer = Callable[[EnqueueContext, Envelope], bool]
Next = Callable[[list[Envelope]], list[str]]
Middleware = Callable[[EnqueueContext, list[Envelope], Next], list[str]]


class InsertHook(Protocol):
    def before_insert(self, context: EnqueueContext, envelopes: Sequence[Envelope]) -> None: ...

    def after_insert(
        self, context: EnqueueContext, envelopes: Sequence[Envelope], ids: list[str] | None,
        error: BaseException | None,
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Plugin:
    """A bundle of middleware and hooks; `kinds` scopes it to batches of those kinds."""

    name: str
    middleware: Sequence[Middleware] = ()
    insert_hooks: Sequence[InsertHook] = ()
    kinds: frozenset[str] | None = None

    def applies_to(self, envelopes: Sequence[Envelope]) -> bool:
        return self.kinds is None or all(e.kind in self.kinds for e in envelopes)


def allow_all(context: EnqueueContext, envelope: Envelope) -> bool:
    return True


@dataclass
class CircuitBreaker:
    """Opens after `failure_threshold` consecutive store-unavailable errors; after
    `reset_after_ms` lets one trial through (half open) and closes on its success."""

    failure_threshold: int = 5
    reset_after_ms: int = 5_000
    _failures: int = 0
    _opened_at: float | None = None
    _trial_running: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def state(self) -> str:
        with self._lock:
            return self._state_locked(time.monotonic())

    def _state_locked(self, now: float) -> str:
        if self._opened_at is None:
            return "closed"
        if (now - self._opened_at) * 1000 >= self.reset_after_ms:
            return "half_open"
        return "open"

    def before_call(self) -> None:
        with self._lock:
            now = time.monotonic()
            state = self._state_locked(now)
            if state == "closed":
                return
            if state == "half_open" and not self._trial_running:
                self._trial_running = True
                return
            waited = (now - (self._opened_at or now)) * 1000
            raise CircuitOpen(state, max(0, int(self.reset_after_ms - waited)))

    def abandon_trial(self) -> None:
        """The call let through never reached the store: the next one may try."""
        with self._lock:
            self._trial_running = False

    def record(self, ok: bool) -> None:
        with self._lock:
            self._trial_running = False
            if ok:
                self._failures = 0
                self._opened_at = None
                return
            self._failures += 1
            if self._failures >= self.failure_threshold or self._opened_at is not None:
                self._opened_at = time.monotonic()


class Client:
    def __init__(
        self,
        store: Producer,
        *,
        authorizer: Authorizer = allow_all,
        middleware: Iterable[Middleware] = (),
        insert_hooks: Iterable[InsertHook] = (),
        plugins: Iterable[Plugin] = (),
        circuit_breaker: CircuitBreaker | None = None,
    ) -> None:
        self.store = store
        self.authorizer = authorizer
        self.middleware = list(middleware)
        self.insert_hooks = list(insert_hooks)
        self.plugins = list(plugins)
        self.circuit_breaker = circuit_breaker

    def enqueue(
        self, kind: str, payload: bytes = b"", *, context: EnqueueContext | None = None,
        scheduled_at_ms: int | None = None, retention_ms: int | None = None,
        conn: Any = None, **fields: Any,
    ) -> str:
        env = Envelope(
            kind=kind, payload=payload, scheduled_at_ms=scheduled_at_ms or 0,
            retention_ms=retention_ms, **fields,
        )
        return self.enqueue_many([env], context=context, conn=conn)[0]

    def enqueue_many(
        self, envelopes: Sequence[Envelope], *, context: EnqueueContext | None = None,
        conn: Any = None,
    ) -> list[str]:
        context = context or DEFAULT_CONTEXT
        envs = [e.validated() for e in envelopes]
        for env in envs:
            if not self.authorizer(context, env):
                raise EnqueueForbidden(env.kind)
        middleware, hooks = self._chain(envs)

        checked = {id(e) for e in envs}

        def insert(batch: list[Envelope]) -> list[str]:
            # Envelopes are frozen: only ones a middleware built anew need checking again.
            batch = [e if id(e) in checked else e.validated() for e in batch]
            if conn is not None:
                return self.store.enqueue_many_in(conn, batch)
            return self.store.enqueue_many(batch)

        call: Next = insert
        for mw in reversed(middleware):
            call = _bind(mw, context, call)
        breaker = self.circuit_breaker
        if breaker is not None:
            breaker.before_call()
        try:
            for hook in hooks:
                hook.before_insert(context, envs)
        except BaseException:
            if breaker is not None:
                breaker.abandon_trial()
            raise
        ids: list[str] | None = None
        error: BaseException | None = None
        try:
            ids = call(envs)
            return ids
        except BaseException as exc:
            error = exc
            raise
        finally:
            if breaker is not None:
                breaker.record(not isinstance(error, StoreUnavailable))
            for hook in hooks:
                hook.after_insert(context, envs, ids, error)

    def _chain(self, envs: Sequence[Envelope]) -> tuple[list[Middleware], list[InsertHook]]:
        if not self.plugins:
            return self.middleware, self.insert_hooks
        middleware, hooks = list(self.middleware), list(self.insert_hooks)
        ordered = [p for p in self.plugins if p.kinds is None] + [
            p for p in self.plugins if p.kinds is not None
        ]
        for plugin in ordered:
            if plugin.applies_to(envs):
                middleware += plugin.middleware
                hooks += plugin.insert_hooks
        return middleware, hooks


def _bind(mw: Middleware, context: EnqueueContext, call_next: Next) -> Next:
    return lambda batch: mw(context, batch, call_next)


def chain(middleware: Sequence[Middleware], context: EnqueueContext, insert: Next) -> Next:
    """``insert`` wrapped in ``middleware``, outermost first: for producers other than
    ``Client`` (the HTTP client, the task layer's asyncio path) running the same chain."""
    call = insert
    for mw in reversed(middleware):
        call = _bind(mw, context, call)
    return call
