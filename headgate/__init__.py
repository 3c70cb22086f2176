"""headgate: a job queue whose dequeue is an admission decision.

The producer side (``open_store``, ``Client``, the core types) loads eagerly. The worker
names load on first use (PEP 562): the worker runtime brings APScheduler, its duty
scheduler, which a producer embedded in a host application has no use for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headgate.client import CircuitBreaker, Client, EnqueueContext, Plugin
from headgate.core import (
    Backpressure,
    CircuitOpen,
    Claim,
    Duplicate,
    EnqueueForbidden,
    Envelope,
    HeadgateError,
    IdConflict,
    InvalidInput,
    InvalidTransition,
    Job,
    JobFilter,
    LeaseLost,
    MissingExtra,
    NotFound,
    Outcome,
    Quarantined,
    State,
    StoreUnavailable,
    Unauthorized,
    fingerprint,
)
from headgate.http_client import HttpClient
from headgate.store import Store, open_store

if TYPE_CHECKING:
    from headgate.tasks import App, Backoff, JobFailed, JobRef, ResultGone, Task
    from headgate.worker import (
        JobContext,
        JobOutcome,
        JsonDecoder,
        RateLimited,
        Retry,
        Revoke,
        Skip,
        Snooze,
        Undecodable,
        Worker,
    )

# The one place the version is written: pyproject.toml reads it from here.
__version__ = "0.2.0"

__all__ = [
    "Backpressure", "CircuitBreaker", "CircuitOpen", "Claim", "Client", "Duplicate",
    "EnqueueContext", "EnqueueForbidden", "Envelope", "HeadgateError", "IdConflict",
    "InvalidInput", "InvalidTransition", "Job", "JobFilter", "LeaseLost", "MissingExtra",
    "NotFound", "Outcome",
    "Plugin", "Quarantined", "State", "Store", "StoreUnavailable", "fingerprint", "open_store",
    "HttpClient", "Unauthorized",
]
# The worker's names: loaded by __getattr__ below on first use.
__all__ += [
    "JobContext", "JobOutcome", "JsonDecoder", "RateLimited", "Retry", "Revoke", "Skip",
    "Snooze", "Undecodable", "Worker",
]
# The task layer's names (headgate.tasks builds on the worker runtime): loaded alike.
__all__ += ["App", "Backoff", "JobFailed", "JobRef", "ResultGone", "Task"]
_TASK_NAMES = frozenset(__all__[-6:])


def __getattr__(name: str) -> object:
    # Only names not bound yet get here: of those in __all__, the worker's and tasks'.
    if name not in __all__:
        raise AttributeError(f"module 'headgate' has no attribute {name!r}")
    import headgate.tasks
    import headgate.worker  # the worker runtime, on first use of one of its names

    value = getattr(headgate.tasks if name in _TASK_NAMES else headgate.worker, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
