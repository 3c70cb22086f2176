"""``HeadgateBackend``: Django's tasks framework with headgate as the queue.

- **Enqueue**: ``task.enqueue(*args, **kwargs)`` (and ``aenqueue``) validates the task
  as Django does, builds the ``TaskResult`` first — so arguments that are not JSON are
  Django's own ``TypeError``, raised before anything is stored — then enqueues one job
  through a ``headgate.App`` on ``OPTIONS["URL"]`` (a store URL, or an http(s):// server
  URL with ``OPTIONS["TOKEN"]``; its producer middleware, e.g. OpenTelemetry, applies).
  The job's kind is the task's ``module_path``, its payload the JSON codec's
  ``{"args": [...], "kwargs": {...}}``, its id the ``TaskResult`` id.
- **Queue and priority** pass through: ``queue_name`` is the headgate queue, and the
  Django priority (-100..100, higher first) is the headgate priority unchanged (an i32,
  higher first, ordered within a partition). ``run_after`` is ``scheduled_at_ms``.
- **Enqueue on commit**: with ``OPTIONS["ENQUEUE_ON_COMMIT"]`` (default True; neither
  Django 6 nor the backport has a setting of its own any more) an enqueue inside
  ``transaction.atomic()`` on ``OPTIONS["DATABASE"]`` (default ``"default"``) is sent by
  ``transaction.on_commit``: a rollback enqueues nothing, and the returned result's id
  is valid (``get_result`` says it does not exist until the commit). Outside a
  transaction it is sent at once.
- **Attempts**: ``OPTIONS["MAX_ATTEMPTS"]``, default 1 where ``headgate.App``'s tasks
  have 25. Django's tasks framework has no retries: a task that raises is FAILED, and
  Django's own backends run it once, so Django code does not expect a task that sent
  an email or charged a card to run again because it raised. Retrying is opted into
  here (e.g. 5), with the store's default backoff and READY in between; a job whose
  worker died is retried either way, as that uses no attempt. docs/tasks.md compares
  the two sets of defaults.
- **Results**: ``get_result(id)`` reads the job (from the store or over the API):
  pending, scheduled, available, retryable → READY; running → RUNNING; completed →
  SUCCESSFUL (``return_value`` is the JSON result); archived, cancelled, quarantined,
  undecodable → FAILED, with one ``TaskError`` per failed attempt. A job that does not
  exist (never enqueued, deleted, or before its transaction committed) raises
  ``TaskResultDoesNotExist``.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils.module_loading import import_string

import headgate
from headgate.core import Envelope, Job, State
from headgate.core.ids import new_id

from . import compat

# The task layer's header: PostgreSQL announces these jobs' finish to result waiters.
RESULT_HEADER = "headgate-result"
MAX_TRACEBACK = 8_000
# One run, as Django's own backends give (see the module docstring).
DEFAULT_MAX_ATTEMPTS = 1

READY_STATES = frozenset({State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RETRYABLE})
FAILED_STATES = frozenset({State.ARCHIVED, State.CANCELLED, State.QUARANTINED,
                           State.UNDECODABLE})


def status_of(state: State) -> Any:
    """The Django status a headgate state reads as."""
    status = compat.TaskResultStatus
    if state in READY_STATES:
        return status.READY
    if state is State.RUNNING:
        return status.RUNNING
    if state is State.COMPLETED:
        return status.SUCCESSFUL
    return status.FAILED


def _moment(ms: int | None) -> datetime | None:
    if ms is None:
        return None
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment if settings.USE_TZ else moment.replace(tzinfo=None)


def error_text(exc: BaseException) -> str:
    """How a task's exception is recorded: its class path on the first line (the
    ``TaskError.exception_class_path``), then the traceback Django would show."""
    cls = type(exc)
    trace = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK:]
    return f"{cls.__module__}.{cls.__qualname__}\n{trace}"


def task_error(entry: dict[str, Any]) -> Any:
    text = str(entry.get("error") or "")
    path, _, trace = text.partition("\n")
    if not path or " " in path or ":" in path:
        # Not written by this backend's worker (e.g. a timeout or a crash): no class.
        path, trace = "builtins.Exception", text
    return compat.TaskError(exception_class_path=path, traceback=trace)


class HeadgateBackend(compat.BaseTaskBackend):  # type: ignore[misc]
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = {k.upper(): v for k, v in self.options.items()}
        self.url: str | None = options.get("URL")
        self.token: str | None = options.get("TOKEN")
        self.enqueue_on_commit = bool(options.get("ENQUEUE_ON_COMMIT", True))
        self.database: str = options.get("DATABASE", "default")
        self.max_attempts = int(options.get("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS))
        self.modules: Sequence[str] = tuple(options.get("MODULES", ()))
        self.app = headgate.App(self.url, token=self.token)

    # -- producing ----------------------------------------------------------------------
    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        result = compat.TaskResult(
            task=task, id=new_id(), status=compat.TaskResultStatus.READY, enqueued_at=None,
            started_at=None, last_attempted_at=None, finished_at=None, args=args,
            kwargs=kwargs, backend=self.alias, errors=[], worker_ids=[])
        # TaskResult normalised the arguments (Django's TypeError for what JSON cannot
        # hold was raised there); the payload is the JSON codec's.
        payload = json.dumps({"args": result.args, "kwargs": result.kwargs},
                             separators=(",", ":"), sort_keys=True).encode()
        scheduled = 0 if task.run_after is None else int(task.run_after.timestamp() * 1000)
        env = Envelope(kind=task.module_path, payload=payload, id=result.id,
                       queue=task.queue_name, priority=task.priority,
                       scheduled_at_ms=scheduled, max_attempts=self.max_attempts,
                       headers={RESULT_HEADER: "1"}).validated()

        def send() -> None:
            self.app.client.enqueue_many([env])
            object.__setattr__(result, "enqueued_at", _moment(int(
                datetime.now(UTC).timestamp() * 1000)))
            compat.task_enqueued.send(type(self), task_result=result)

        if self.enqueue_on_commit:
            transaction.on_commit(send, using=self.database)
        else:
            send()
        return result

    # -- reading ------------------------------------------------------------------------
    def get_result(self, result_id: str) -> Any:
        reader = self.app.ref(result_id).store
        job = reader.get_job(result_id, include_payload=True)
        if job is None:
            raise compat.TaskResultDoesNotExist(result_id)
        task = self.task_for(job)
        if task is None:
            raise compat.TaskResultDoesNotExist(
                f"{result_id} is a headgate job of kind {job.kind!r}, not a Django task")
        result = self.result_of(task, job)
        if job.state is State.COMPLETED:
            blob = reader.get_result(result_id)
            value = None if blob is None else json.loads(blob.bytes)
            object.__setattr__(result, "_return_value", value)
        return result

    def task_for(self, job: Job) -> Any:
        """The Django task a job runs (None when its kind names none)."""
        try:
            task = import_string(job.kind)
        except ImportError:
            return None
        if not isinstance(task, compat.Task):
            return None
        return task.using(priority=job.priority, queue_name=job.queue, backend=self.alias)

    def result_of(self, task: Any, job: Job) -> Any:
        body = json.loads(job.payload) if job.payload else {}
        runs = len(job.errors) + (1 if job.state in (State.RUNNING, State.COMPLETED) else 0)
        return compat.TaskResult(
            task=task, id=job.id, status=status_of(job.state),
            enqueued_at=_moment(job.enqueued_at_ms),
            started_at=_moment(job.attempted_at_ms),
            last_attempted_at=_moment(job.attempted_at_ms),
            finished_at=_moment(job.finalized_at_ms),
            args=body.get("args", []), kwargs=body.get("kwargs", {}), backend=self.alias,
            errors=[task_error(e) for e in job.errors],
            worker_ids=[job.worker_id or ""] * runs)


__all__ = ["DEFAULT_MAX_ATTEMPTS", "HeadgateBackend", "error_text", "status_of", "task_error"]
