"""``Task``: a function the app can run as a job, typed by the function it wraps.

``Task[P, R]`` carries the wrapped function's parameters ``P`` and return type ``R``
(for an ``async def``, what it returns when awaited), so ``task.enqueue(...)`` is
checked against the function's signature by a type checker and ``ref.result()`` is an
``R``. At run time ``enqueue`` binds the arguments to the signature too, so a call that
would fail in the worker fails at the producer, before anything is stored.

Options for one call go through ``task.options(...)``: enqueue's own parameters are the
function's (PEP 612 allows none beside them), so ``conn=`` for a transactional enqueue
is an option too: ``task.options(conn=conn).enqueue(...)``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from headgate.core import Envelope, InvalidInput
from headgate.core.clock import wall_ms

from .codec import Codec
from .errors import EncodeError, UnimportableTask, UnknownOption
from .ref import JobRef
from .retry import RetryPolicy

P = ParamSpec("P")
R = TypeVar("R")

# The header that marks a job as the task layer's: on PostgreSQL its finish is
# announced to result waiters (headgate/db/postgres/functions/finished_notify.sql).
RESULT_HEADER = "headgate-result"

# Envelope fields a task or a call may set (kind and payload are the task's own).
ENVELOPE_OPTIONS = frozenset({
    "id", "schema_version", "queue", "priority", "partition_key", "rate_class", "weight",
    "scheduled_at_ms", "max_attempts", "retention_ms", "unique_key", "unique_window_ms",
    "unique_debounce_ms", "unique_replace", "unique_exclude_kind", "tags", "pending",
    "sticky_worker", "headers",
})
# Per call only: a delay from now, and the producer's connection (transactional enqueue).
CALL_OPTIONS = ENVELOPE_OPTIONS | {"delay_ms", "conn"}
# Defaults a task may declare at @app.task (per-call ones make no sense there).
TASK_DEFAULTS = ENVELOPE_OPTIONS - {"id", "scheduled_at_ms", "unique_key", "pending"}


def check_options(options: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise UnknownOption(f"{where} got unknown option {unknown[0]!r}; known: "
                            f"{', '.join(sorted(allowed))}")


class TaskOwner(Protocol):
    """What a task needs of its app (`App` is one): the clock a delay counts from and
    the producer its calls go through."""

    clock_offset_ms: int

    def enqueue_many(self, calls: Iterable[TaskCall[Any]], *,
                     conn: Any = None) -> list[JobRef[Any]]: ...

    async def enqueue_many_async(self, calls: Iterable[TaskCall[Any]], *,
                                 conn: Any = None) -> list[JobRef[Any]]: ...


@dataclass(frozen=True, slots=True)
class TaskCall(Generic[R]):
    """One call of a task, encoded and ready to enqueue (``task.call(...)``), for
    ``enqueue_many``. Encoding happened when it was made, so a bad argument fails there."""

    task: Task[Any, R]
    envelope: Envelope
    conn: Any = field(default=None, compare=False)


class Task(Generic[P, R]):
    def __init__(
        self, app: TaskOwner, fn: Callable[P, Any], *, name: str, codec: Codec,
        partition: Callable[..., str] | None, retry: RetryPolicy | object,
        retry_on: tuple[type[BaseException], ...] | None, timeout_ms: int | None,
        deadline_ms: int | None, defaults: Mapping[str, Any],
        call_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.codec = codec
        self.partition = partition
        self.retry = retry
        self.retry_on = retry_on
        self.timeout_ms = timeout_ms
        self.deadline_ms = deadline_ms
        self.defaults = dict(defaults)
        self.call_options = dict(call_options or {})
        self.is_async = inspect.iscoroutinefunction(fn)
        self._signature = inspect.signature(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<Task {self.name}>"

    def check_importable(self) -> None:
        """Refuse a kind of ``__main__`` (``UnimportableTask``): checked when a job of
        it would be stored, not at declaration, since a worker may import this very
        module by its own name (``--app tasks:app``) and declare it properly."""
        if self.name.startswith("__main__."):
            module = sys.modules.get(getattr(self.fn, "__module__", "") or "")
            path = getattr(module, "__file__", None)
            raise UnimportableTask(self.name, Path(path).stem if path else None)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Call the function here, now (no job): what tests of its logic want."""
        return self.fn(*args, **kwargs)

    def options(self, **options: Any) -> Task[P, R]:
        """This task with options for the calls made through it: any envelope field
        (priority, queue, unique_key, tags, headers, ...), ``delay_ms`` (run no earlier
        than that many ms from now) and ``conn`` (enqueue inside that connection's
        transaction: a psycopg Connection for ``enqueue``, an AsyncConnection for
        ``enqueue_async``)."""
        check_options(options, CALL_OPTIONS, f"{self.name}.options()")
        return Task(self.app, self.fn, name=self.name, codec=self.codec,
                    partition=self.partition, retry=self.retry, retry_on=self.retry_on,
                    timeout_ms=self.timeout_ms, deadline_ms=self.deadline_ms,
                    defaults=self.defaults, call_options={**self.call_options, **options})

    def call(self, *args: P.args, **kwargs: P.kwargs) -> TaskCall[R]:
        """Encode one call without enqueueing it (for ``enqueue_many``)."""
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from None
        options = dict(self.call_options)
        conn = options.pop("conn", None)
        delay_ms = options.pop("delay_ms", None)
        fields: dict[str, Any] = {**self.defaults, **options}
        if delay_ms is not None:
            if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
                raise InvalidInput("delay_ms must be an integer >= 0 (milliseconds)")
            if "scheduled_at_ms" in fields:
                raise InvalidInput("give delay_ms or scheduled_at_ms, not both")
            fields["scheduled_at_ms"] = (wall_ms() + self.app.clock_offset_ms
                                         + delay_ms)
        if "partition_key" not in options and self.partition is not None:
            fields["partition_key"] = self._partition_key(args, kwargs)
        fields["headers"] = {**fields.get("headers", {}), RESULT_HEADER: "1"}
        try:
            payload = self.codec.encode_args(tuple(args), dict(kwargs))
        except EncodeError:
            raise
        except Exception as exc:  # a codec of the user's: its failure is still bad input
            raise EncodeError(f"{self.name}: arguments cannot be encoded: {exc}") from exc
        if not isinstance(payload, bytes):
            raise EncodeError(f"{self.name}: the codec returned "
                              f"{type(payload).__name__}, not bytes")
        return TaskCall(self, Envelope(kind=self.name, payload=payload, **fields), conn)

    def _partition_key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        assert self.partition is not None
        try:
            key = self.partition(*args, **kwargs)
        except Exception as exc:
            raise InvalidInput(f"{self.name}: partition callable raised "
                               f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(key, str):
            raise InvalidInput(f"{self.name}: partition callable returned "
                               f"{type(key).__name__}, not a string")
        return key

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobRef[R]:
        call = self.call(*args, **kwargs)
        return self.app.enqueue_many([call], conn=call.conn)[0]

    def enqueue_many(self, calls: Iterable[TaskCall[R]], *,
                     conn: Any = None) -> list[JobRef[R]]:
        """All or nothing, in one transaction (``conn``: inside the caller's)."""
        return self.app.enqueue_many(calls, conn=conn)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobRef[R]:
        call = self.call(*args, **kwargs)
        return (await self.app.enqueue_many_async([call], conn=call.conn))[0]

    async def enqueue_many_async(self, calls: Iterable[TaskCall[R]], *,
                                 conn: Any = None) -> list[JobRef[R]]:
        return await self.app.enqueue_many_async(calls, conn=conn)


__all__ = ["RESULT_HEADER", "Task", "TaskCall"]
