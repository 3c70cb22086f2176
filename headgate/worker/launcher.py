"""``headgate worker --app module:obj``: load the app, apply overrides, run with signals.

``obj`` is either

- a ``Worker`` instance the module built with its own store (the module decides where
  the store is; ``--store`` is then refused rather than silently ignored), or
- a callable taking a ``Store`` and returning a ``Worker`` — the recommended form: the
  store comes from ``--store`` or ``HG_STORE``/``HG_SQLITE``/``HG_PG``, so one app
  module runs against any database, or
- a ``headgate.App`` (anything with ``build_worker(store_url, migrate=...)``): one made
  with a URL (or a store) runs on that database, and a ``--store``/``HG_*`` naming
  another is refused; ``App()`` takes ``--store``, else the environment's. It upserts
  its declared schedules and returns a Worker running its tasks.

The first log line names the store the worker opened (without a password) and where
that came from, so a worker on the wrong database is seen at once.

Overrides, strongest first: command-line flags, then ``HG_LEASE_MS`` (lease only), then
what the app configured.

Signals: the first SIGTERM/SIGINT stops admission and drains in-flight jobs for up to
``--drain-ms`` while leases keep being renewed, releases what is left (no attempt is
charged) and exits 0. A second one releases what it can at once and exits 1. An
operator ``restart`` exits 75 after the drain, so a supervisor can tell "start me
again" from "I was told to stop" (systemd: ``Restart=always`` or
``RestartForceExitStatus=75``).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from headgate.services.config import (
    ConfigError,
    Settings,
    display_store_url,
    names_a_store,
    store_source,
    url_of_store,
)
from headgate.store import open_store

from . import logformat
from .handlers import isolated_modules
from .runtime import Worker
from .signals import install_signal_handlers

log = logging.getLogger("headgate.worker")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def import_object(ref: str) -> Any:
    """``package.module:attr.path`` → the object. The current directory is importable,
    as with gunicorn and flask, so ``--app examples.shop:make_worker`` works from a
    checkout."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--app must look like package.module:object, got {ref!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{module_name!r} has no attribute {attr!r}") from None
    return obj


def check_worker_factory(ref: str, obj: Any) -> None:
    """Refuse an ``--app`` object that is not a store -> Worker factory before it is
    called with the store: a task would run its function with a Store as argument (a
    side effect, then a traceback), and another function fails with a bare TypeError."""
    if not callable(obj):
        raise ConfigError(f"{ref} is neither a Worker, an App, nor a callable returning a "
                          "Worker")
    if callable(getattr(obj, "enqueue", None)):  # a headgate Task (or a look-alike)
        raise ConfigError(f"{ref} is a task, not an app: point --app at the headgate.App "
                          "it is declared on (module:app)")
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # no signature to read (some builtins): just call it
        return
    try:
        signature.bind(object())
    except TypeError:
        raise ConfigError(f"{ref} is neither a Worker, an App, nor a callable taking a "
                          f"store and returning a Worker (its signature is "
                          f"{signature})") from None


def load_worker(ref: str, store_url: str | None, env: Mapping[str, str] | None = None,
                *, migrate: bool | None = None, source: str | None = None) -> Worker:
    """``migrate`` (None: ``HG_MIGRATE``) says whether opening the store applies pending
    migrations; a Worker instance opened its own store, so it cannot take either.
    ``source`` says where ``store_url`` came from (default ``--store``), for an App's
    refusal of a store other than its own."""
    obj = import_object(ref)
    build = getattr(obj, "build_worker", None)
    if callable(build) and not isinstance(obj, type):
        worker = build(store_url, migrate=migrate,
                       **({"source": source} if source is not None else {}))
        if not isinstance(worker, Worker):
            raise ConfigError(f"{ref}.build_worker() returned {type(worker).__name__}, "
                              "not a Worker")
        return worker
    if isinstance(obj, Worker):
        if store_url:
            raise ConfigError(
                f"{ref} is a Worker with its own store; --store cannot replace it. Point "
                "--app at a function that takes a store and returns a Worker instead."
            )
        if migrate is not None:
            raise ConfigError(
                f"{ref} is a Worker with its own store, already open; --migrate/"
                "--no-migrate cannot apply to it. Point --app at a function that takes "
                "a store and returns a Worker instead."
            )
        return obj
    check_worker_factory(ref, obj)
    settings = Settings.from_env(env)
    if store_url:
        settings = settings.with_store_url(store_url)
    if migrate is not None:
        settings = replace(settings, migrate=migrate)
    store = open_store(settings.store_url(), **settings.store_options())
    worker = obj(store)
    if not isinstance(worker, Worker):
        raise ConfigError(f"{ref}(store) returned {type(worker).__name__}, not a Worker")
    return worker


def store_origin(obj: Any, store_url: str | None) -> str:
    """Where the store of a worker loaded from ``obj`` came from, for its first log line."""
    if isinstance(obj, Worker):
        return "the Worker itself"
    own = getattr(obj, "own_store_url", None)
    if callable(own) and own() is not None and not (store_url or names_a_store()):
        return "the App's URL"
    return store_source(store_url)


def log_store(worker: Worker, origin: str) -> None:
    url = url_of_store(worker.store)
    log.info("worker store: %s (from %s)",
             display_store_url(url) if url else type(worker.store).__name__, origin)


def env_lease_ms(env: Mapping[str, str] | None = None) -> int | None:
    env = os.environ if env is None else env
    if not env.get("HG_LEASE_MS", "").strip():
        return None
    return Settings.from_env(env).lease_ms


def configure_logging(level: str, fmt: str = "text") -> None:
    """stderr logging as ``text`` or ``json`` lines (``logformat``)."""
    logformat.configure_logging(level, fmt)


def run_worker(
    app: str, *, store_url: str | None = None, queues: str | None = None,
    concurrency: int | None = None, lease_ms: int | None = None, drain_ms: int | None = None,
    duties: bool | None = None, isolated: bool | None = None, worker_id: str | None = None,
    migrate: bool | None = None,
) -> int:
    """Everything ``headgate worker`` does after parsing flags; returns the exit code."""
    worker = load_worker(app, store_url, migrate=migrate)
    if lease_ms is None:
        lease_ms = env_lease_ms()
    worker.configure(
        queues=[q.strip() for q in queues.split(",") if q.strip()] if queues else None,
        concurrency=concurrency, lease_ms=lease_ms, drain_ms=drain_ms, duties=duties,
        isolated=isolated, worker_id=worker_id,
    )
    # Once the flags are known good (the start's isolation check too), so a refused
    # flag stays the command's only line.
    isolated_modules(worker._handlers, worker.config.isolated)
    log_store(worker, store_origin(import_object(app), store_url))
    install_signal_handlers(worker, drain_ms)
    try:
        return worker.run()
    finally:
        try:
            worker.store.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
