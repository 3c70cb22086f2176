"""The server assembly that ``headgate serve`` starts (a service, docs/ARCHITECTURE.md).

One gunicorn process with gthread workers serves the web app; the same process runs
the fleet's duties (under duty leases) and, with ``--workers N --app``, a worker beside
them. Everything that holds a connection is built in the gunicorn worker after the
fork, and stopped from its ``worker_exit`` hook: the worker drains first (its jobs may
need the duties), then the duties step down from their leases so another server takes
over on its next tick rather than after the lease TTL. Before that, on the stop signal
itself, the app's endless responses (live sockets, event streams) are told to end:
gunicorn's graceful wait would otherwise last its whole timeout for any open console.

This module sits below the web layer, so it does not build the app itself: the caller
passes an ``AppFactory`` (the CLI's builds ``headgate.web.create_app`` and hands back
the app's store and the API's producer ``Client``). ``bench/httpbench.py`` runs its
ceiling app through ``run_gunicorn(gunicorn_options(...))`` so it measures the very
gunicorn configuration serve uses.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gunicorn.app.base import BaseApplication

from headgate.services.client import Client
from headgate.services.config import ConfigError, Settings, display_store_url
from headgate.services.duties import DutyRunner
from headgate.store import Store, open_store
from headgate.worker import Worker
from headgate.worker.launcher import check_worker_factory, import_object, load_worker

log = logging.getLogger("headgate.server")

# gthread workers heartbeat from their event loop, not per request, so this bounds a
# hung worker without cutting off long-held SSE/WebSocket connections.
WORKER_TIMEOUT_S = 120
GRACEFUL_TIMEOUT_S = 10


@dataclass(frozen=True)
class ServedApp:
    """What the factory hands the server in its gunicorn worker: the WSGI app, its store
    (already open, so a bad store fails start-up rather than the first request) and the
    producer the duties fire periodic jobs through, so the API's authorizer, middleware
    and hooks apply to them as to an HTTP enqueue."""

    wsgi: Callable[..., Any]
    store: Store
    producer: Client
    # Called (once, on a thread of its own) when the server receives its stop signal.
    stopping: Callable[[], None] | None = None


class AppFactory(Protocol):
    """Builds the served app; ``background=False`` when the server's duties run bulk
    operations, so the app does not run them a second time."""

    def __call__(self, settings: Settings, *, background: bool) -> ServedApp: ...


@dataclass(frozen=True)
class InProcessWorker:
    """``serve --workers N --app REF``: a worker run inside the server process, on the
    server's store, without duties of its own (the server runs them, or was told not
    to)."""

    app_ref: str
    concurrency: int
    drain_ms: int

    def check(self, settings: Settings, source: str = "--store") -> None:
        """Raise ``ConfigError`` for an ``--app`` the server could not run, before the
        server starts: a wrong reference, or an App made with a store other than the
        server's, fails the command, not the gunicorn worker after the fork."""
        target = import_object(self.app_ref)
        if callable(getattr(target, "build_worker", None)):  # a headgate.App
            command_settings = getattr(target, "command_settings", None)
            if callable(command_settings):
                command_settings(settings.store_url(), source)
            return
        if isinstance(target, Worker) or not callable(target):
            raise ConfigError(
                f"{self.app_ref} must be a headgate.App or a callable taking a store and "
                "returning a Worker: the server's worker uses the server's store")
        check_worker_factory(self.app_ref, target)

    def start(self, settings: Settings, source: str = "--store") -> Worker:
        worker = load_worker(self.app_ref, settings.store_url(), migrate=settings.migrate,
                             source=source)
        worker.configure(concurrency=self.concurrency, drain_ms=self.drain_ms, duties=False)
        return worker.start()


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``headgate serve`` decided from its flags and the environment.
    ``settings.api_addr`` is the address to bind."""

    settings: Settings
    threads: int = 16
    duties: bool = True
    worker: InProcessWorker | None = None
    # Where the store came from (--store, the environment, the default): logged, and
    # named when an in-process App's own store disagrees.
    store_source: str = "--store"


def gunicorn_options(config: ServerConfig) -> dict[str, Any]:
    """The gunicorn settings serve runs with (one process, gthread)."""
    graceful = GRACEFUL_TIMEOUT_S
    if config.worker is not None:  # the worker drains after the requests, within this
        graceful += -(-config.worker.drain_ms // 1000) + 5
    return {
        "bind": [config.settings.api_addr],
        "workers": 1,
        "worker_class": "gthread",
        "threads": config.threads,
        "timeout": WORKER_TIMEOUT_S,
        "graceful_timeout": graceful,
        "proc_name": "headgate",
        # The default control socket is one fixed path per user: two servers (or
        # parallel tests) would fight over it, and nothing here uses it.
        "control_socket_disable": True,
    }


# The signals gunicorn's worker stops on: TERM gracefully, INT and QUIT at once.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


def _on_stop_signals(callback: Callable[[], None]) -> None:
    """Run ``callback`` on a thread of its own when the first stop signal arrives, then
    let gunicorn's own handler act. gunicorn has no hook between the signal and its
    graceful wait, so its handlers (installed by then) are chained."""
    fired = threading.Event()

    def chain(previous: Any) -> Callable[[int, Any], None]:
        def handler(signum: int, frame: Any) -> None:
            if not fired.is_set():
                fired.set()  # a handler must not block: the callback may wait on threads
                threading.Thread(target=callback, name="headgate-stopping",
                                 daemon=True).start()
            if callable(previous):
                previous(signum, frame)
        return handler

    for signum in STOP_SIGNALS:
        signal.signal(signum, chain(signal.getsignal(signum)))
    signal.siginterrupt(signal.SIGTERM, False)  # as gunicorn had it: requests keep going


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, Any], load: Callable[[], Any],
                 on_exit: Callable[[], None] | None,
                 on_stopping: Callable[[], None] | None) -> None:
        self._options = dict(options)
        if on_exit is not None:
            self._options["worker_exit"] = lambda _server, _worker: on_exit()
        if on_stopping is not None:
            self._options["post_worker_init"] = lambda _worker: _on_stop_signals(on_stopping)
        self._load = load
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._load()


def run_gunicorn(options: Mapping[str, Any], load: Callable[[], Any],
                 on_exit: Callable[[], None] | None = None,
                 on_stopping: Callable[[], None] | None = None) -> int:
    """Run gunicorn with ``options`` until it stops; its exit code. ``load`` builds the
    WSGI app in each gunicorn worker (after the fork); ``on_exit`` runs in that worker
    on its way out; ``on_stopping`` in that worker when its stop signal arrives, before
    gunicorn's graceful wait."""
    try:
        _Gunicorn(options, load, on_exit, on_stopping).run()
    except SystemExit as exc:  # gunicorn ends the arbiter (and each worker) with exit()
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def check_store(settings: Settings) -> None:
    """Open the store once (migrating when the settings say so) and close it, so a
    server refuses to start on an unusable store (``StoreUnavailable``) instead of
    failing in its gunicorn worker."""
    open_store(settings.store_url(), **settings.store_options()).close()


class _ServerProcess:
    """The duties and the worker of one gunicorn worker process."""

    def __init__(self, config: ServerConfig, build: AppFactory) -> None:
        self._config = config
        self._build = build
        self._duties: DutyRunner | None = None
        self._worker: Worker | None = None
        self._stopping: Callable[[], None] | None = None

    def load(self) -> Callable[..., Any]:
        config = self._config
        served = self._build(config.settings, background=not config.duties)
        self._stopping = served.stopping
        if config.duties:
            self._duties = DutyRunner(served.store, client=served.producer)
            self._duties.start()
        if config.worker is not None:
            self._worker = config.worker.start(config.settings, config.store_source)
        return served.wsgi

    def stopping(self) -> None:
        if self._stopping is not None:
            self._stopping()

    def stop(self) -> None:
        if self._worker is not None and self._config.worker is not None:
            self._worker.stop(self._config.worker.drain_ms, timeout=GRACEFUL_TIMEOUT_S + 30)
        if self._duties is not None:
            self._duties.stop()


def run_server(config: ServerConfig, build: AppFactory) -> int:
    """Check the in-process worker's app and the store, then serve until SIGTERM or
    SIGINT; the exit code (0 after a signal). Raises ``ConfigError`` or
    ``StoreUnavailable`` before anything listens."""
    if config.worker is not None:
        config.worker.check(config.settings, config.store_source)
    check_store(config.settings)
    # The first line: which database this server is on (no password).
    log.info("serve store: %s (from %s)", display_store_url(config.settings.store_url()),
             config.store_source)
    process = _ServerProcess(config, build)
    return run_gunicorn(gunicorn_options(config), process.load, process.stop,
                        process.stopping)


__all__ = [
    "AppFactory", "InProcessWorker", "ServedApp", "ServerConfig", "check_store",
    "gunicorn_options", "run_gunicorn", "run_server",
]
