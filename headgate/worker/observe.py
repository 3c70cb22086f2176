"""What the worker tells observers about each attempt: log fields and attempt hooks.

While a pool thread runs an attempt, ``attempt_fields()`` gives that attempt's job id,
kind, queue, attempt number and worker id, so log records made anywhere in the handler
(``logging.getLogger(...)`` or ``ctx.logger``) carry them as fields: the JSON log format
(``logformat``) writes them beside the message, not inside it.

Attempt hooks (``Worker.add_attempt_hook``) are for tracing and metrics: a hook is
``hook(job, worker_id)`` returning a context manager entered, in the pool thread, before
the payload is decoded and left after the attempt's decision is known; what it yields
is called with that ``Decision`` (its ``outcome``, ``error``, and ``exc`` the exception
behind it, if any). A hook that raises is logged and skipped: observing never changes
an outcome.

``outcome_label`` is the name observers report an attempt's end by: the handler's
outcome, except that a retry with no attempts left is ``archived`` (the store archives
it; no retry and no delay follow), so the log line, the JSON log's ``outcome`` and a
trace agree with the job's state.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

from headgate.core import Job, Outcome, State

from .execution import Decision

log = logging.getLogger("headgate.worker")

AttemptHook = Callable[[Job, str], AbstractContextManager[Callable[[Decision], None]]]

_fields: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "headgate_attempt_fields", default=None)


def attempt_fields() -> dict[str, Any] | None:
    """The running attempt's fields in this context, or None outside one."""
    return _fields.get()


def fields_of(job: Job, worker_id: str) -> dict[str, Any]:
    # `attempt` counts this run: 1 on the first (job.attempt counts failures before it).
    return {"job_id": job.id, "kind": job.kind, "queue": job.queue,
            "attempt": job.attempt + 1, "worker_id": worker_id}


def outcome_label(decision: Decision, job: Job) -> str:
    """How an attempt ended, in the job's terms: ``archived`` for a retry that used the
    job's last attempt, else the decision's own label (success, retry, skip, ...)."""
    if decision.outcome is Outcome.RETRY and job.attempt + 1 >= job.max_attempts:
        return State.ARCHIVED.value
    return decision.label


@contextmanager
def attempt_scope(job: Job, worker_id: str, hooks: Sequence[AttemptHook] = ()
                  ) -> Iterator[Callable[[Decision], None]]:
    """Around one attempt: its log fields set, its hooks entered. Yields ``finish``,
    to be called with the attempt's decision before the block ends."""
    token = _fields.set(fields_of(job, worker_id))
    try:
        with ExitStack() as stack:
            finishers: list[Callable[[Decision], None]] = []
            for hook in hooks:
                try:
                    finishers.append(stack.enter_context(hook(job, worker_id)))
                except Exception:  # noqa: BLE001 - an observer never fails a job
                    log.exception("job %s: attempt hook %r failed to start", job.id, hook)

            def finish(decision: Decision) -> None:
                for done in finishers:
                    try:
                        done(decision)
                    except Exception:  # noqa: BLE001
                        log.exception("job %s: attempt hook failed", job.id)

            yield finish
    finally:
        _fields.reset(token)


__all__ = ["AttemptHook", "attempt_fields", "attempt_scope", "fields_of", "outcome_label"]
