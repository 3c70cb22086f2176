"""headgate: a job queue whose dequeue is an admission decision.

The producer side (``open_store``, ``Client``, the core types) loads eagerly. The worker
names load on first use (PEP 562): the worker runtime brings APScheduler, its duty
scheduler, which a producer embedded in a host application has no use for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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
from headgate.services.client import CircuitBreaker, Client, EnqueueContext, Plugin
from headgate.store import Store, open_store

if TYPE_CHECKING:
    from headgate.services.http_client import HttpClient
    from headgate.tasks import (
        App,
        Backoff,
        Codec,
        EncodeError,
        JobFailed,
        JobRef,
        JsonCodec,
        ResultGone,
        Task,
        UnimportableTask,
        UnknownOption,
    )
    from headgate.worker import (
        JobContext,
        JobOutcome,
        JsonDecoder,
        RateLimited,
        Retry,
        Revoke,
        Skip,
        Snooze,
        Throttled,
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
# Names loaded on first use (PEP 562), by the module that defines them: the worker
# runtime and the task layer built on it cost a producer import time it has no use for.
_WORKER_NAMES = [
    "JobContext", "JobOutcome", "JsonDecoder", "RateLimited", "Retry", "Revoke", "Skip",
    "Snooze", "Throttled", "Undecodable", "Worker",
]
_TASK_NAMES = [
    "App", "Backoff", "Codec", "EncodeError", "JobFailed", "JobRef", "JsonCodec", "ResultGone",
    "Task", "UnimportableTask", "UnknownOption",
]
__all__ += [
    "JobContext", "JobOutcome", "JsonDecoder", "RateLimited", "Retry", "Revoke", "Skip",
    "Snooze", "Throttled", "Undecodable", "Worker",
]
__all__ += [
    "App", "Backoff", "Codec", "EncodeError", "JobFailed", "JobRef", "JsonCodec", "ResultGone",
    "Task", "UnimportableTask", "UnknownOption",
]
_LAZY = {
    **dict.fromkeys(_WORKER_NAMES, "headgate.worker"),
    **dict.fromkeys(_TASK_NAMES, "headgate.tasks"),
    "HttpClient": "headgate.services.http_client",  # http.client and uuid, for HTTP producers only
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'headgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
