"""Running Django tasks in a headgate ``Worker`` (``manage.py headgate_worker``, or
``headgate worker --django`` from the project's folder with DJANGO_SETTINGS_MODULE set).

A worker must know each kind before it starts, and Django keeps no registry of tasks,
so the worker imports the ``tasks`` module of every installed app (as
``autodiscover_modules`` does for admin modules) and the backend's
``OPTIONS["MODULES"]``, and registers every task object it finds there that uses the
backend. A job whose task was not found is undecodable on this worker (never retried,
visible in the console).

Each run closes stale database connections before and after (Django's request cycle
does the same), calls the task (an ``async def`` through ``async_to_sync``; a
``takes_context`` task gets a ``TaskContext``), stores the JSON return value as the
job's result and sends Django's ``task_started`` / ``task_finished`` signals. An
exception is recorded with its class path and traceback (``backend.error_text``) and
retried while the job has attempts left.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import ModuleType
from typing import Any

import django
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections
from django.utils.module_loading import autodiscover_modules

from headgate.core import Job, State
from headgate.services.config import ConfigError
from headgate.store import open_store
from headgate.worker import JobContext, Retry, Worker
from headgate.worker.launcher import env_lease_ms, log_store, store_origin

from . import compat
from .backend import HeadgateBackend, error_text


def discover_tasks(backend: HeadgateBackend) -> dict[str, Any]:
    """``{module_path: task}`` for every task of ``backend`` in the apps' ``tasks``
    modules and ``OPTIONS["MODULES"]``."""
    autodiscover_modules("tasks")
    modules: list[ModuleType] = []
    for config in apps.get_app_configs():
        module = getattr(config.module, "tasks", None)
        if isinstance(module, ModuleType):
            modules.append(module)
    modules += [importlib.import_module(name) for name in backend.modules]
    found: dict[str, Any] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, compat.Task) and value.backend == backend.alias:
                found[value.module_path] = value
    return found


def _decode(raw: bytes, schema_version: int) -> tuple[list[Any], dict[str, Any]]:
    body = json.loads(raw) if raw else {}
    args, kwargs = body.get("args", []), body.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError("a Django task payload has a list 'args' and an object 'kwargs'")
    return args, kwargs


def make_handler(backend: HeadgateBackend, task: Any) -> Callable[[Job, JobContext], bytes]:
    def handler(job: Job, ctx: JobContext) -> bytes:
        args, kwargs = ctx.payload
        running = backend.result_of(task, _as_running(job, ctx))
        close_old_connections()
        compat.task_started.send(sender=type(backend), task_result=running)
        try:
            if task.takes_context:
                value = task.call(compat.TaskContext(task_result=running), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            data = json.dumps(compat.normalize_json(value)).encode()
        except Exception as exc:
            last = job.attempt + 1 >= job.max_attempts
            object.__setattr__(running, "status", compat.TaskResultStatus.FAILED if last
                               else compat.TaskResultStatus.READY)
            running.errors.append(compat.TaskError(
                exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                traceback=error_text(exc).partition("\n")[2]))
            compat.task_finished.send(sender=type(backend), task_result=running)
            raise Retry(reason=error_text(exc)) from exc
        finally:
            close_old_connections()
        object.__setattr__(running, "status", compat.TaskResultStatus.SUCCESSFUL)
        object.__setattr__(running, "_return_value", json.loads(data))
        compat.task_finished.send(sender=type(backend), task_result=running)
        return data

    return handler


def _as_running(job: Job, ctx: JobContext) -> Job:
    # The claimed job as the store now has it (its payload holds the arguments).
    return dataclasses.replace(job, state=State.RUNNING, worker_id=ctx.worker_id)


def build_worker(backend: HeadgateBackend, *, store_url: str | None = None,
                 queues: Iterable[str] | None = None, concurrency: int = 10,
                 migrate: bool | None = None, **options: Any) -> Worker:
    """A Worker on the backend's store URL, or on ``store_url`` (``--store``) /
    HG_STORE/HG_SQLITE/HG_PG when the backend names none (an http(s) backend). A
    command's store naming another database than the backend's own URL is a
    ConfigError naming both, as for an App: the worker would drain a database the
    producers never write to. ``migrate`` (None: ``HG_MIGRATE``) says whether opening
    the store applies pending migrations."""
    settings = backend.app.command_settings(store_url)
    if migrate is not None:
        settings = replace(settings, migrate=migrate)
    store = open_store(settings.store_url(), **settings.store_options())
    names = list(queues or sorted(backend.queues) or [compat.DEFAULT_TASK_QUEUE_NAME])
    worker = Worker(store, queues=names, concurrency=concurrency, **options)
    for hook in backend.app.attempt_hooks:
        worker.add_attempt_hook(hook)
    for path, task in sorted(discover_tasks(backend).items()):
        worker.register(path, make_handler(backend, task), decoder=_decode)
    return worker


def setup_django() -> None:
    """``django.setup()`` for a process that is not manage.py: the settings module named
    by DJANGO_SETTINGS_MODULE, the current directory importable as manage.py's folder
    is. ``ConfigError`` when Django cannot be set up that way."""
    name = os.environ.get("DJANGO_SETTINGS_MODULE", "").strip()
    if not name:
        raise ConfigError("DJANGO_SETTINGS_MODULE is not set: name the project's settings "
                          "module (as manage.py does), e.g. mysite.settings")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        django.setup()
    except (ImportError, ImproperlyConfigured) as exc:
        raise ConfigError(f"cannot set up Django with {name}: {exc}") from exc


def backend_worker(alias: str = "default", **options: Any) -> Worker:
    """``build_worker`` for ``settings.TASKS[alias]``, what ``manage.py headgate_worker
    --backend ALIAS`` and ``headgate worker --django ALIAS`` run. ``ConfigError`` when
    the alias names no backend or one that is not a ``HeadgateBackend``."""
    try:
        backend = compat.task_backends[alias]
    except ImproperlyConfigured as exc:  # the framework's InvalidTaskBackend(Error)
        raise ConfigError(f"TASKS[{alias!r}]: {exc}") from exc
    if not isinstance(backend, HeadgateBackend):
        raise ConfigError(f"TASKS[{alias!r}] is {type(backend).__name__}, not "
                          "HeadgateBackend")
    return build_worker(backend, **options)


def run_backend_worker(
    alias: str = "default", *, store_url: str | None = None, queues: str | None = None,
    concurrency: int | None = None, lease_ms: int | None = None,
    drain_ms: int | None = None, duties: bool | None = None, isolated: bool | None = None,
    worker_id: str | None = None, migrate: bool | None = None,
) -> int:
    """Everything ``headgate worker --django`` does after parsing flags: set Django up,
    build the worker ``manage.py headgate_worker`` builds, apply the overrides as
    ``headgate worker`` does (``HG_LEASE_MS`` included), run it until a signal; the
    exit code."""
    setup_django()
    names = [q.strip() for q in (queues or "").split(",") if q.strip()] or None
    worker = backend_worker(alias, store_url=store_url, queues=names,
                            concurrency=concurrency or 10, migrate=migrate)
    try:
        worker.configure(lease_ms=lease_ms if lease_ms is not None else env_lease_ms(),
                         drain_ms=drain_ms, duties=duties, isolated=isolated,
                         worker_id=worker_id)
        log_store(worker, store_origin(compat.task_backends[alias].app, store_url))
        return worker.run()  # SIGTERM/SIGINT drain, as under headgate worker
    finally:
        worker.store.close()


__all__ = ["backend_worker", "build_worker", "discover_tasks", "make_handler",
           "run_backend_worker", "setup_django"]
