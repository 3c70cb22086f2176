"""The task layer's typed errors: what a producer waiting on a task can be told."""

from __future__ import annotations

from headgate.core import HeadgateError, InvalidInput


class JobFailed(HeadgateError):
    """The job ended without a value: archived, cancelled, quarantined or undecodable,
    or completed with a result the task's codec cannot decode. ``state`` is the job's
    terminal state and ``error`` the last error recorded for it (None when none was)."""

    def __init__(self, job_id: str, state: str, error: str | None) -> None:
        first = (error or "").strip().splitlines()[:1]
        super().__init__(f"job {job_id} {state}" + (f": {first[0]}" if first else ""))
        self.job_id = job_id
        self.state = state
        self.error = error


class ResultGone(HeadgateError):
    """The job no longer exists, so neither does its result: it succeeded with
    ``retention_ms=0`` (deleted on success), was revoked, or was deleted by retention or
    an operator."""

    def __init__(self, job_id: str) -> None:
        super().__init__(
            f"result of job {job_id} is gone: the job no longer exists (deleted on success "
            "with retention_ms=0, revoked, or removed by retention or an operator)")
        self.job_id = job_id


class EncodeError(InvalidInput, TypeError):
    """Arguments the task's codec cannot encode; nothing was stored. A TypeError too, as
    for any call with arguments of the wrong type."""


class UnknownOption(InvalidInput, TypeError):
    """An option name ``Task.options`` or ``App.task`` does not know."""


__all__ = ["EncodeError", "JobFailed", "ResultGone", "UnknownOption"]
