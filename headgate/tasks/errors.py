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


class UnimportableTask(InvalidInput):
    """A task declared in a script run directly (``python tasks.py``) without ``name=``:
    its kind starts with ``__main__.``, which no worker process can import, so every job
    of it would end undecodable. Raised when it is enqueued (or its schedule synced),
    everywhere, ``app.testing()`` included, so a test fails where production would.
    Declaring it is fine: a worker started with ``--app tasks:app`` imports the module
    by its own name."""

    def __init__(self, kind: str, module: str | None) -> None:
        qualname = kind.removeprefix("__main__.")
        module = module or "your_module"
        super().__init__(
            f"cannot enqueue task {kind!r}: it was declared in a script run directly "
            f"(python {module}.py), and a worker imports that module as {module!r}, where "
            f"the task is '{module}.{qualname}': jobs of {kind!r} would end undecodable. "
            f"Import the task from its module instead (from {module} import "
            f"{qualname.split('.')[0]}), or give it a name (@app.task(name=\"{qualname}\")); "
            "app.testing() refuses it too")
        self.kind = kind


__all__ = ["EncodeError", "JobFailed", "ResultGone", "UnimportableTask", "UnknownOption"]
