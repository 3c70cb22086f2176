"""What a worker knows about each registered handler: ``HandlerSpec``.

A leaf of the worker package (below it only ``context`` and ``decoders``): the registry
(``Worker.register``) builds the specs and execution (``pool``, ``attempts``,
``engine``, ``isolation``) reads them, so execution never imports the ``Worker``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from headgate.core import InvalidInput, Job

from .decoders import Decoder
from .job_context import JobContext

Handler = Callable[[Job, JobContext], Any]


def check_handler(fn: object) -> None:
    """Refuse at registration what would be acknowledged without running: a coroutine
    object (a call of the handler, not the handler), anything not callable, and
    generator functions (calling one runs none of its body)."""
    if inspect.iscoroutine(fn):
        fn.close()
        raise TypeError("handler must be a function, not a coroutine object: register the "
                        "async def itself, not a call of it")
    if not callable(fn):
        raise TypeError(f"handler must be callable as fn(job, ctx) (a function or an async "
                        f"def), not {type(fn).__name__}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"handler {getattr(fn, '__qualname__', fn)!r} is a generator "
                        "function: calling it would run none of its body")


def handler_ref(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a module-level function, or ValueError explaining why an
    isolated handler cannot be something else: the child finds it by that name."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise ValueError(
            f"isolated handlers must be module-level functions importable by name; "
            f"{fn!r} is not"
        )
    return f"{module}:{qualname}"


def resolve_ref(ref: str) -> Callable[..., Any]:
    module_name, _, qualname = ref.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """One registration: the handler and the options it was registered with."""

    kind: str
    fn: Handler
    decoder: Decoder | None = None
    timeout_ms: int | None = None
    deadline_ms: int | None = None
    isolated: bool | None = None  # None: the worker-wide setting

    @classmethod
    def of(cls, kind: str, fn: Handler, *, decoder: Decoder | None = None,
           timeout_ms: int | None = None, deadline_ms: int | None = None,
           isolated: bool | None = None) -> HandlerSpec:
        check_handler(fn)
        if isolated:
            handler_ref(fn)  # fail at registration, not at the first job
        return cls(kind, fn, decoder, timeout_ms, deadline_ms, isolated)

    def runs_isolated(self, worker_default: bool) -> bool:
        return worker_default if self.isolated is None else self.isolated


def isolated_modules(handlers: Mapping[str, HandlerSpec], worker_default: bool) -> list[str]:
    """The modules of the handlers that run isolated (the fork server preloads them).

    Checked when the worker starts, because a handler registered before the worker
    became isolated (``configure(isolated=True)``, ``headgate worker --isolated``) was
    not checked at registration: a closure, a lambda or a task layer's handler (built
    by its ``App``) cannot be found by name in a child, so the worker refuses to start
    (InvalidInput) rather than fail every job it takes."""
    modules: list[str] = []
    refused: dict[str, str] = {}  # kind -> the handler's name
    for kind, spec in sorted(handlers.items()):
        if not spec.runs_isolated(worker_default):
            continue
        try:
            modules.append(handler_ref(spec.fn).partition(":")[0])
        except ValueError:
            refused[kind] = getattr(spec.fn, "__qualname__", None) or repr(spec.fn)
    if refused:
        kinds = ", ".join(repr(k) for k in refused)
        names = ", ".join(dict.fromkeys(refused.values()))
        raise InvalidInput(
            f"cannot run isolated: the handler of {kinds} ({names}) is not a module-level "
            "function a child process can import by name (a task's handler is built by "
            "its App, so tasks run in the worker process); register it with "
            "isolated=False or run the worker without isolated mode")
    return list(dict.fromkeys(modules))
