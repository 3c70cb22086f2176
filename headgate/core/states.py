"""Job states and worker outcomes (docs/ARCHITECTURE.md, Job lifecycle)."""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    PENDING = "pending"
    SCHEDULED = "scheduled"
    AVAILABLE = "available"
    RUNNING = "running"
    RETRYABLE = "retryable"
    COMPLETED = "completed"
    ARCHIVED = "archived"
    CANCELLED = "cancelled"
    QUARANTINED = "quarantined"
    UNDECODABLE = "undecodable"
    # Not stored: a transition to `deleted` removes the row.
    DELETED = "deleted"


TERMINAL: frozenset[State] = frozenset(
    {State.COMPLETED, State.ARCHIVED, State.CANCELLED, State.QUARANTINED, State.UNDECODABLE}
)
UNFINISHED: frozenset[State] = frozenset(
    {State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RUNNING, State.RETRYABLE}
)
STORED_STATES: tuple[State, ...] = tuple(s for s in State if s is not State.DELETED)


class Outcome(StrEnum):
    """What a worker reports for an attempt; each is an event of the transition table."""

    SUCCESS = "success"
    RETRY = "retry"
    SKIP = "skip"
    REVOKE = "revoke"
    SNOOZE = "snooze"
    RATE_LIMITED = "rate_limited"
    THROTTLED = "throttled"
    UNDECODABLE = "undecodable"
