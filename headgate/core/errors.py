"""Typed errors of the store port.

Every failure a caller can act on has its own type, so the API maps errors to status
codes by type and the worker can tell "lease lost" from "store unavailable".
"""

from __future__ import annotations


class HeadgateError(Exception):
    """Base of every error headgate raises on purpose."""


class InvalidInput(HeadgateError):
    """Bad envelope, policy or argument; nothing was written."""


class NotFound(HeadgateError):
    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} not found: {ident}")
        self.what = what
        self.ident = ident


class InvalidTransition(HeadgateError):
    """The operation is not allowed from the job's current state."""


class IdConflict(HeadgateError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"id conflict: job {job_id}")
        self.job_id = job_id


class Duplicate(HeadgateError):
    """A live (or in-window) job already holds the unique key."""

    def __init__(self, existing_id: str, replaced: bool) -> None:
        super().__init__(f"duplicate unique key: existing job {existing_id}")
        self.existing_id = existing_id
        self.replaced = replaced


class Quarantined(HeadgateError):
    def __init__(self, fingerprint: str) -> None:
        super().__init__(f"fingerprint is quarantined: {fingerprint}")
        self.fingerprint = fingerprint


class Backpressure(HeadgateError):
    def __init__(self, queue: str, limit: int, current: int, incoming: int) -> None:
        super().__init__(
            f"enqueue backpressure on queue {queue}: {current} unfinished of {limit}, "
            f"{incoming} incoming"
        )
        self.queue = queue
        self.limit = limit
        self.current = current
        self.incoming = incoming


class LeaseLost(HeadgateError):
    """A fenced write named a lease that is no longer current: the worker must stop."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"lease lost: job {job_id}")
        self.job_id = job_id


class StoreUnavailable(HeadgateError):
    """The store could not be reached or stayed locked; safe to retry later."""


class MissingExtra(StoreUnavailable):
    """The store URL names an engine whose optional dependencies are not installed.

    A StoreUnavailable, so every caller that refuses an unusable store (the CLI's exit
    69, a worker's start-up) refuses this one the same way; unlike an outage, retrying
    does not help: installing ``headgate-queue[<extra>]`` does."""

    def __init__(self, extra: str, engine: str, cause: str) -> None:
        super().__init__(
            f"store unavailable: {engine} support is not installed ({cause}); "
            f"install it with: pip install 'headgate-queue[{extra}]'")
        self.extra = extra


class Unauthorized(HeadgateError):
    """The server refused the caller's credentials: no token, a wrong one, or a
    read-only token for a change (HTTP 401/403). Retrying with the same token cannot
    help."""


class EnqueueForbidden(HeadgateError):
    def __init__(self, kind: str) -> None:
        super().__init__(f"enqueue forbidden: {kind}")
        self.kind = kind


class CircuitOpen(HeadgateError):
    def __init__(self, state: str, retry_after_ms: int) -> None:
        super().__init__(f"enqueue circuit {state}; retry after {retry_after_ms} ms")
        self.state = state
        self.retry_after_ms = retry_after_ms
