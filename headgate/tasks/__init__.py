"""The task layer (docs/tasks.md): typed tasks, results, asyncio producers, per-task
retries, middleware, schedules declared in code and test helpers, over the low-level
``Client`` and ``Worker`` (which stay the API for raw kinds and payloads).

``App`` (app.py) declares and runs tasks; ``Task`` (task.py) enqueues them; ``JobRef``
(ref.py) waits for results; ``Backoff`` (retry.py) is a retry policy; codec.py turns
arguments and results into bytes; run.py is the worker side; testing.py is
``app.testing()``.
"""

from .app import App
from .codec import JSON, Codec, JsonCodec
from .errors import EncodeError, JobFailed, ResultGone, UnimportableTask, UnknownOption
from .ref import JobRef
from .retry import Backoff
from .run import TaskRun, current
from .task import Task, TaskCall
from .testing import TestSession

__all__ = [
    "JSON", "App", "Backoff", "Codec", "EncodeError", "JobFailed", "JobRef", "JsonCodec",
    "ResultGone", "Task", "TaskCall", "TaskRun", "TestSession", "UnimportableTask",
    "UnknownOption", "current",
]
