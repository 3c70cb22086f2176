"""Turning what a handler did into the one ack the store gets (a ``Decision``).

Shared by in-thread and isolated execution so both map returns, outcomes and crashes
identically.
"""

from __future__ import annotations

import inspect
import os
import traceback
from dataclasses import dataclass, field
from typing import Any

from headgate.core import Job, Outcome
from headgate.core.envelope import MAX_PAYLOAD

from .outcomes import JobOutcome

# RateLimited on a job without a rate class: snooze this long when no delay was given.
DEFAULT_RATE_LIMITED_SNOOZE_MS = 1_000
TRACEBACK_FRAMES = 5
# The runtime's own frames (the call into the handler) say nothing about the failure.
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@dataclass(slots=True)
class Decision:
    outcome: Outcome
    error: str | None = None
    delay_ms: int | None = None
    result: bytes | None = None
    result_schema_version: int = 1
    logs: list[str] = field(default_factory=list)
    # The exception behind a failure (for observers; the store gets `error`).
    exc: BaseException | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        return self.outcome.value


def error_text(exc: BaseException) -> str:
    """``Type: message`` plus the innermost frames: enough to find the line without
    storing a full traceback in every attempt's history."""
    head = f"{type(exc).__name__}: {exc}".rstrip(": ")
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(_OWN_DIR)][-TRACEBACK_FRAMES:]
    lines = [f"  {f.filename}:{f.lineno} in {f.name}" for f in frames]
    return "\n".join([head, *lines]) if lines else head


def from_outcome(outcome: JobOutcome, job: Job) -> Decision:
    if outcome.outcome is Outcome.RATE_LIMITED and not job.rate_class:
        # Without a class the store would make it available at once and we would spin.
        delay = outcome.delay_ms if outcome.delay_ms is not None \
            else DEFAULT_RATE_LIMITED_SNOOZE_MS
        return Decision(Outcome.SNOOZE, None, delay)
    return Decision(outcome.outcome, outcome.error_text(), outcome.delay_ms)


def from_exception(exc: BaseException, job: Job) -> Decision:
    if isinstance(exc, JobOutcome):
        decision = from_outcome(exc, job)
        decision.exc = exc.__cause__  # e.g. the task layer's Retry from the task's error
        return decision
    return Decision(Outcome.RETRY, error_text(exc), exc=exc)


def never_run(value: Any) -> str | None:
    """The error for a returned coroutine, awaitable or generator whose body never ran
    (acknowledging it would lose the job), else None. Closes it: no "never awaited"
    warning for it."""
    if not (inspect.isawaitable(value) or inspect.isgenerator(value)
            or inspect.isasyncgen(value)):
        return None
    if inspect.iscoroutine(value) or inspect.isgenerator(value):
        value.close()
    return (f"handler returned a {type(value).__name__} that was never run (await it, or "
            "register the function itself)")


def from_value(value: Any, job: Job, result: bytes | None, result_schema_version: int
               ) -> Decision:
    """A handler's return value: an outcome, bytes (shorthand for ``ctx.set_result``),
    or anything else, which is success and otherwise ignored."""
    if isinstance(value, JobOutcome):
        return from_outcome(value, job)
    if (unrun := never_run(value)) is not None:
        return Decision(Outcome.RETRY, unrun)
    if isinstance(value, bytes | bytearray | memoryview) and result is None:
        if len(value) > MAX_PAYLOAD:
            return Decision(Outcome.RETRY, f"returned result must be at most {MAX_PAYLOAD} bytes")
        return Decision(Outcome.SUCCESS, result=bytes(value))
    return Decision(Outcome.SUCCESS, result=result, result_schema_version=result_schema_version)
