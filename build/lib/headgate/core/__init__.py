"""Pure domain layer: no I/O, no clocks read, no database."""

from .backoff import retry_delay_ms
from .envelope import Envelope
from .errors import (
    Backpressure,
    CircuitOpen,
    Duplicate,
    EnqueueForbidden,
    HeadgateError,
    IdConflict,
    InvalidInput,
    InvalidTransition,
    LeaseLost,
    MissingExtra,
    NotFound,
    Quarantined,
    StoreUnavailable,
    Unauthorized,
)
from .fingerprint import fingerprint
from .job import AckRequest, Blob, Claim, Explanation, Job, JobFilter, JobPage, Progress
from .states import STORED_STATES, TERMINAL, UNFINISHED, Outcome, State
from .transitions import GuardContext, transition

__all__ = [
    "AckRequest", "Backpressure", "Blob", "CircuitOpen", "Claim", "Duplicate", "EnqueueForbidden",
    "Envelope", "Explanation", "GuardContext", "HeadgateError", "IdConflict", "InvalidInput",
    "InvalidTransition", "Job", "JobFilter", "JobPage", "LeaseLost", "MissingExtra", "NotFound",
    "Outcome", "Progress", "Quarantined",
    "STORED_STATES", "State", "StoreUnavailable", "TERMINAL", "UNFINISHED", "Unauthorized",
    "fingerprint",
    "retry_delay_ms", "transition",
]
