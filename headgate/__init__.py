"""headgate: a job queue whose dequeue is an admission decision."""

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
    fingerprint,
)
from headgate.store import Store, open_store
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

__version__ = "0.1.0"

__all__ = [
    "Backpressure", "CircuitBreaker", "CircuitOpen", "Claim", "Client", "Duplicate",
    "EnqueueContext", "EnqueueForbidden", "Envelope", "HeadgateError", "IdConflict",
    "InvalidInput", "InvalidTransition", "Job", "JobFilter", "LeaseLost", "MissingExtra",
    "NotFound", "Outcome",
    "Plugin", "Quarantined", "State", "Store", "StoreUnavailable", "fingerprint", "open_store",
]
__all__ += [
    "JobContext", "JobOutcome", "JsonDecoder", "RateLimited", "Retry", "Revoke", "Skip",
    "Snooze", "Undecodable", "Worker",
]
