"""The ``headgate`` command (SPEC §12): ``serve`` and ``migrate``.

Other subcommands (``worker``, ``demo``, ``bench``) attach to the same ``main`` group.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import click

from headgate import __version__
from headgate.config import ConfigError, Settings, redact_url
from headgate.core import StoreUnavailable

# gthread workers heartbeat from their event loop, not per request, so this bounds a
# hung worker without cutting off long-held SSE/WebSocket connections.
WORKER_TIMEOUT_S = 120
GRACEFUL_TIMEOUT_S = 10

# 2 = usage/configuration error, as click uses for bad arguments.
EXIT_USAGE = 2
# sysexits' EX_UNAVAILABLE: the store cannot be used (unreachable, not a database, a
# schema this code cannot run on) — worth retrying or fixing elsewhere, unlike a flag.
EXIT_STORE_UNAVAILABLE = 69


def _fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    click.echo(f"headgate: error: {message}", err=True)
    click.get_current_context().exit(code)


def _store_failed(exc: StoreUnavailable) -> NoReturn:
    text = str(exc)
    if not text.startswith("store unavailable"):
        text = f"store unavailable: {text}"
    _fail(text, EXIT_STORE_UNAVAILABLE)


def _settings(store_url: str | None, migrate: bool | None = None) -> Settings:
    """Env settings with the ``--store`` (and ``--migrate``) overrides applied,
    validated before any I/O."""
    try:
        settings = Settings.from_env()
        if store_url:
            settings = settings.with_store_url(store_url)
        if migrate is not None:
            settings = replace(settings, migrate=migrate)
        settings.store_url()
    except ConfigError as exc:
        _fail(str(exc))
    return settings


def _check_store(settings: Settings) -> None:
    """Open the store once (migrating when asked) and close it, so a server refuses to
    start on an unusable store instead of failing in its gunicorn worker."""
    import headgate  # deferred: pulls in the whole store layer

    try:
        store = headgate.open_store(settings.store_url(), **settings.store_options())
    except StoreUnavailable as exc:
        _store_failed(exc)
    store.close()


def _configure_logging(level: str, fmt: str = "text") -> None:
    from headgate.worker.launcher import configure_logging

    configure_logging(level, fmt)
    # APScheduler warns "Execution of job … skipped" (or "missed") each time a duty
    # is still running at its next tick. Duties run one at a time by design, so that is
    # expected and would flood the log; its ERRORs (a duty that raised) still show.
    # The two loggers by name too: DutyRunner sets them to WARNING when they are unset.
    for name in ("apscheduler", "apscheduler.scheduler", "apscheduler.executors.default"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _bind_addr(settings: Settings, addr: str | None) -> str:
    """The address to listen on (the option, else the settings'), refused before any I/O
    when it is remote and the settings do not allow that."""
    addr = addr or settings.api_addr
    try:
        refusal = settings.remote_bind_refusal(addr)
    except ConfigError as exc:
        _fail(str(exc))
    if refusal:
        _fail(refusal)
    return addr


# The database a command works on (serve, migrate).
store_option = click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="sqlite:///PATH or postgresql://… Default: from HG_STORE/HG_SQLITE/HG_PG.",
)

# Whether opening the store applies pending migrations (serve, worker).
migrate_option = click.option(
    "--migrate/--no-migrate",
    "migrate",
    default=None,
    help="Apply pending schema migrations at start-up. Default: $HG_MIGRATE, else on. "
    "Off: a database whose schema is behind is refused (run `headgate migrate`).",
)

log_level_option = click.option(
    "--log-level",
    default="INFO",
    envvar="HG_LOG_LEVEL",
    show_envvar=True,
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="Level of headgate's log lines (stderr).",
)


log_format_option = click.option(
    "--log-format",
    default="text",
    envvar="HG_LOG_FORMAT",
    show_envvar=True,
    show_default=True,
    type=click.Choice(["text", "json"], case_sensitive=False),
    help="text: one line per record; json: one JSON object per line, with job_id, kind, "
    "queue, attempt and worker_id as fields inside a job's attempt.",
)


@click.group()
@click.version_option(__version__, prog_name="headgate")
def main() -> None:
    """headgate: a job queue whose dequeue is an admission decision."""


@main.command()
@click.option(
    "--addr",
    default=None,
    metavar="HOST:PORT",
    help="Listen address. Default: $HG_API_ADDR or 127.0.0.1:8080.",
)
@store_option
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Request threads; each held SSE/WebSocket connection occupies one.",
)
@click.option(
    "--duties/--no-duties",
    default=True,
    show_default=True,
    help="Run the background duties (reclaimer, promoter, periodic scheduler, retention, "
    "operations, worker aging, history) under duty leases.",
)
@click.option(
    "--workers",
    "workers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Also run a worker with this many handler threads in the server process "
    "(needs --app).",
)
@click.option("--app", "app_ref", default=None, metavar="MODULE:FACTORY",
              help="With --workers: a headgate.App, or a callable taking a store and "
                   "returning a Worker.")
@click.option("--drain-ms", type=click.IntRange(min=0), default=30_000, show_default=True,
              help="With --workers: on SIGTERM/SIGINT, how long in-flight jobs may finish "
                   "before they are released.")
@migrate_option
@log_level_option
@log_format_option
def serve(addr: str | None, store_url: str | None, threads: int, duties: bool,
          workers: int, app_ref: str | None, drain_ms: int, migrate: bool | None,
          log_level: str, log_format: str) -> None:
    """Run the API server (gunicorn, one process, gthread workers), optionally with an
    in-process worker (--workers N --app). Exit codes: 0 after SIGTERM/SIGINT, 2 for
    configuration errors, 69 when the store is unavailable (unreachable, not a database,
    its schema newer than this headgate, or behind it with migrations off)."""
    settings = _settings(store_url, migrate)
    addr = _bind_addr(settings, addr)
    pool = _worker_pool(workers, app_ref, drain_ms)
    _configure_logging(log_level, log_format.lower())
    _check_store(settings)
    _run_gunicorn(replace(settings, api_addr=addr), threads, duties, pool)


@dataclass(frozen=True)
class _WorkerPool:
    """`serve --workers N --app REF`: a worker run inside the server process."""

    app_ref: str
    concurrency: int
    drain_ms: int

    def start(self, settings: Settings) -> Any:
        from headgate.worker.launcher import load_worker

        worker = load_worker(self.app_ref, settings.store_url(), migrate=settings.migrate)
        # The server process runs its own duties (or was told not to with --no-duties).
        worker.configure(concurrency=self.concurrency, drain_ms=self.drain_ms, duties=False)
        return worker.start()


def _worker_pool(workers: int, app_ref: str | None, drain_ms: int) -> _WorkerPool | None:
    """Checked before the server starts: a wrong --app fails the command, not the
    gunicorn worker after fork."""
    if not workers:
        if app_ref is not None:
            _fail("--app needs --workers N")
        return None
    if app_ref is None:
        _fail("--workers needs --app MODULE:FACTORY (a callable taking a store and "
              "returning a Worker)")
    from headgate.worker import Worker
    from headgate.worker.launcher import import_object

    try:
        factory = import_object(app_ref)
    except ConfigError as exc:
        _fail(str(exc))
    if callable(getattr(factory, "build_worker", None)):  # a headgate.App
        return _WorkerPool(app_ref, workers, drain_ms)
    if isinstance(factory, Worker) or not callable(factory):
        _fail(f"{app_ref} must be a headgate.App or a callable taking a store and returning "
              "a Worker: the server's worker uses the server's store")
    return _WorkerPool(app_ref, workers, drain_ms)


def _start_duties(app: Any, store: Any) -> Any:
    """The serve process's DutyRunner. Periodic jobs go through the API's producer, so
    its enqueue authorizer, middleware and hooks apply to them too."""
    from headgate.duties import DutyRunner

    client = None
    try:
        from headgate.api.context import api_state

        client = api_state(app).producer(store)
    except (ImportError, KeyError):  # API not mounted: a plain Client
        pass
    runner = DutyRunner(store, client=client)
    runner.start()
    return runner


def _run_gunicorn(settings: Settings, threads: int, duties: bool = True,
                  pool: _WorkerPool | None = None) -> None:
    # Imported here so `headgate migrate` and `--help` stay light.
    from gunicorn.app.base import BaseApplication

    from headgate.web import create_app, get_store

    class _Server(BaseApplication):  # type: ignore[misc]
        def __init__(self) -> None:
            self._options: dict[str, Any] = {
                "bind": [settings.api_addr],
                "workers": 1,
                "worker_class": "gthread",
                "threads": threads,
                "timeout": WORKER_TIMEOUT_S,
                # An in-process worker drains after the requests, within this bound.
                "graceful_timeout": GRACEFUL_TIMEOUT_S + (
                    -(-pool.drain_ms // 1000) + 5 if pool is not None else 0),
                "proc_name": "headgate",
                # Default control socket is one fixed path per user: two servers
                # (or parallel tests) would fight over it, and we don't use it.
                "control_socket_disable": True,
                # In the worker process, on its way out: step down from duty leases
                # so another server takes over on its next tick, not after the TTL.
                "worker_exit": lambda server, worker: self._stop(),
            }
            self._duties: Any = None
            self._worker: Any = None
            super().__init__()

        def _stop(self) -> None:
            if self._worker is not None:  # drain first: its jobs may need the duties
                self._worker.stop(pool.drain_ms if pool is not None else None,
                                  timeout=GRACEFUL_TIMEOUT_S + 30)
            if self._duties is not None:
                self._duties.stop()

        def load_config(self) -> None:
            for key, value in self._options.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            # Runs in the worker, after fork, so no DB connection crosses a fork.
            # With duties on, bulk operations run under the operations duty lease.
            app = create_app(config=settings, background=not duties)
            # Open (and migrate) now: a bad store URL should fail start-up, not the
            # first request.
            store = get_store(app)
            if duties:
                self._duties = _start_duties(app, store)
            if pool is not None:
                self._worker = pool.start(settings)
            return app

    _Server().run()


@main.command()
@store_option
def migrate(store_url: str | None) -> None:
    """Apply pending schema migrations and print the schema version. Exit codes: 0 when
    the schema is current, 2 for configuration errors, 69 when the store is unavailable
    (unreachable, not a database, or its schema newer than this headgate)."""
    import headgate  # deferred: pulls in the whole store layer

    # Migrating is this command's job, whatever HG_MIGRATE says about start-up.
    settings = _settings(store_url, migrate=True)
    url = settings.store_url()
    try:
        store = headgate.open_store(url, **settings.store_options())
    except StoreUnavailable as exc:
        _store_failed(exc)
    try:
        version = store.schema_version()
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()
    click.echo(f"{redact_url(url)}: schema version {version}")


@main.command()
@click.option("--app", "app", required=True, metavar="MODULE:OBJ",
              help="A headgate.App, a Worker, or a callable taking a store and returning "
                   "a Worker.")
@click.option("--store", "store_url", default=None, metavar="URL",
              help="sqlite:///PATH or postgresql://… (factory apps only). "
                   "Default: from HG_STORE/HG_SQLITE/HG_PG.")
@click.option("--queues", default=None, metavar="A,B", help="Queues to work (override).")
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="Handler threads (override).")
@click.option("--lease-ms", type=int, default=None,
              help="Lease length (override), at least 250. Default: $HG_LEASE_MS or the "
                   "app's.")
@click.option("--drain-ms", type=click.IntRange(min=0), default=None,
              help="On SIGTERM/SIGINT, how long in-flight jobs may finish before they are "
                   "released. Default: the app's (30000).")
@click.option("--duties/--no-duties", default=None,
              help="Run the maintenance duties a fleet of workers needs without a "
                   "server (reclaimer, promoter, scheduler, retention, worker aging, "
                   "history) under duty leases, one runner per duty in the fleet. "
                   "Default: on (unless the app's Worker says duties=False).")
@click.option("--isolated/--no-isolated", default=None,
              help="Run handlers in child processes.")
@click.option("--worker-id", default=None, help="Registry id. Default: host:pid:random.")
@click.option("--log-level", default="INFO", show_default=True, envvar="HG_LOG_LEVEL",
              show_envvar=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="INFO logs one line per job outcome.")
@log_format_option
@migrate_option
def worker(app: str, store_url: str | None, queues: str | None, concurrency: int | None,
           lease_ms: int | None, drain_ms: int | None, duties: bool | None,
           isolated: bool | None, worker_id: str | None, log_level: str,
           log_format: str, migrate: bool | None) -> None:
    """Run a worker process. Exit codes: 0 after a graceful stop (SIGTERM, SIGINT or a
    `terminate` signal), 75 after a `restart` signal (start it again), 1 when a second
    SIGTERM/SIGINT cut the drain short, 2 for configuration errors, 69 when the store is
    unavailable (unreachable, not a database, its schema newer than this headgate, or
    behind it with migrations off)."""
    from headgate.core import InvalidInput
    from headgate.worker.launcher import run_worker

    _configure_logging(log_level, log_format.lower())
    try:
        code = run_worker(app, store_url=store_url, queues=queues, concurrency=concurrency,
                          lease_ms=lease_ms, drain_ms=drain_ms, duties=duties,
                          isolated=isolated, worker_id=worker_id, migrate=migrate)
    except StoreUnavailable as exc:
        _store_failed(exc)
    except (ConfigError, ValueError, InvalidInput) as exc:
        _fail(str(exc))
    click.get_current_context().exit(code)



@main.command()
@click.option("--db", "db_path", default="headgate-demo.db", show_default=True,
              metavar="PATH", help="SQLite file for the demo; seeded when it has no queues.")
@click.option("--fresh", is_flag=True, help="Delete the demo file first and seed anew.")
@click.option("--addr", default=None, metavar="HOST:PORT",
              help="Listen address. Default: $HG_API_ADDR or 127.0.0.1:8080.")
@click.option("--workers/--no-workers", "with_workers", default=True, show_default=True,
              help="Run demo workers and a producer (in a child process) on the data.")
@log_level_option
@log_format_option
def demo(db_path: str, fresh: bool, addr: str | None, with_workers: bool,
         log_level: str, log_format: str) -> None:
    """Seed a realistic data set (queues, tenants, a throttled rate class, a concurrency
    ceiling, a quarantined fingerprint, schedules, dead letters, running jobs), run
    workers on it and serve the console — the fastest way to see headgate. Exit codes:
    as `headgate serve`."""
    from headgate.dashboard import demo as demo_mod

    settings = _settings(f"sqlite:///{db_path}", migrate=True)
    addr = _bind_addr(settings, addr)
    _configure_logging(log_level, log_format.lower())
    try:
        seeded, _ = demo_mod.prepare(db_path, fresh=fresh)
    except StoreUnavailable as exc:
        _store_failed(exc)
    click.echo(f"demo: {'seeded' if seeded else 'reusing'} {db_path}; console at http://{addr}/")
    fleet = demo_mod.spawn_fleet(db_path) if with_workers else None
    try:
        _run_gunicorn(replace(settings, api_addr=addr), 16, True)
    finally:
        if fleet is not None:
            fleet.terminate()
            fleet.wait(timeout=15)

if __name__ == "__main__":
    main()


# `headgate bench NAME …`: the repository's benchmarks (bench/), which stay scripts so
# they can import the peer harness by path and run without the package installed.
BENCHMARKS = {
    "api": "api.py",
    "engine": "engine.py",
    "import_time": "import_time.py",
    "inspect": "inspection.py",
    "peers": "peers_headgate.py",
    "reliability": "reliability.py",
    "worker": "worker.py",
}


@main.command(context_settings={"ignore_unknown_options": True,
                                "allow_interspersed_args": False})
@click.argument("name", type=click.Choice(sorted(BENCHMARKS)))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(name: str, args: tuple[str, ...]) -> None:
    """Run one of the benchmarks in the checkout's bench/ folder (JSON medians on
    stdout); ARGS go to it (`headgate bench engine --help`). bench/compare.sh runs
    headgate beside the peers. Exit codes: the benchmark's, 2 outside a checkout."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "bench" / BENCHMARKS[name]
    if not script.exists():
        _fail(f"{script} not found: benchmarks run from a headgate checkout")
    code = subprocess.call([sys.executable, str(script), *args], cwd=script.parent.parent)
    click.get_current_context().exit(code)

