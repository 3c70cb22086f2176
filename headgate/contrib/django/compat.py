"""The one place that knows where Django's tasks framework lives: ``django.tasks``
(Django 6) or the ``django_tasks`` backport (Django 5.2 on Python 3.11). The names used
here are the same in both."""

from __future__ import annotations

import importlib
from typing import Any


def _framework() -> str:
    for name in ("django.tasks", "django_tasks"):
        try:
            importlib.import_module(f"{name}.backends.base")
        except ImportError:
            continue
        return name
    raise ImportError("headgate.contrib.django needs Django's tasks framework: Django >= 6 "
                      "(django.tasks) or, on Django 5.2, the django-tasks backport; "
                      "pip install 'headgate-queue[django]'")


FRAMEWORK = _framework()
_base: Any = importlib.import_module(f"{FRAMEWORK}.base")
_backends: Any = importlib.import_module(f"{FRAMEWORK}.backends.base")
_exceptions: Any = importlib.import_module(f"{FRAMEWORK}.exceptions")
_signals: Any = importlib.import_module(f"{FRAMEWORK}.signals")
_root: Any = importlib.import_module(FRAMEWORK)

BaseTaskBackend: Any = _backends.BaseTaskBackend
Task: Any = _base.Task
TaskContext: Any = _base.TaskContext
TaskError: Any = _base.TaskError
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
TASK_MIN_PRIORITY: int = _base.TASK_MIN_PRIORITY
TASK_MAX_PRIORITY: int = _base.TASK_MAX_PRIORITY
DEFAULT_TASK_QUEUE_NAME: str = _base.DEFAULT_TASK_QUEUE_NAME
TaskResultDoesNotExist: type[Exception] = _exceptions.TaskResultDoesNotExist
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished
task_backends: Any = _root.task_backends
try:  # Django 6 keeps it in django.utils.json, the backport in its utils
    normalize_json: Any = importlib.import_module("django.utils.json").normalize_json
except (ImportError, AttributeError):
    normalize_json = importlib.import_module(f"{FRAMEWORK}.utils").normalize_json

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME", "FRAMEWORK", "TASK_MAX_PRIORITY", "TASK_MIN_PRIORITY",
    "BaseTaskBackend", "Task", "TaskContext", "TaskError", "TaskResult",
    "TaskResultDoesNotExist", "TaskResultStatus", "task_backends", "task_enqueued",
    "normalize_json", "task_finished", "task_started",
]
