"""The ``headgate`` command: ``serve`` and ``migrate``.

Other subcommands (``worker``, ``demo``, ``bench``) attach to the same ``main`` group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
from click.core import ParameterSource

from headgate import __version__
from headgate.core import StoreUnavailable
from headgate.services.config import ConfigError, Settings, redact_url, store_source

if TYPE_CHECKING:
    from headgate.services.server import ServedApp, ServerConfig

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


# How --store is written, for every command that takes it.
STORE_HELP = ("The database: sqlite:///relative/path.db (three slashes: relative to the "
              "working directory), sqlite:////absolute/path.db (four: an absolute path) or "
              "postgresql://user@host/dbname. Default: $HG_STORE (the same URLs, or sqlite / "
              "pg naming $HG_SQLITE / $HG_PG), else sqlite:///headgate.db.")

# The database a command works on (serve, migrate).
store_option = click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help=STORE_HELP,
)

# Whether opening the store applies pending migrations (serve, worker).
migrate_option = click.option(
    "--migrate/--no-migrate",
    "migrate",
    default=None,
    help="Apply pending schema migrations at start-up. Default: $HG_MIGRATE, else on. "
    "Off: a database whose schema is behind is refused (run `headgate migrate`).",
)

class _EnvChoice(click.Choice):
    """A choice whose value may come from an HG_ variable. A wrong flag stays click's
    usage error; a wrong variable is a configuration error like every other HG_
    setting: one ``headgate: error:`` line, exit 2."""

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> object:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            if ctx is None or param is None or param.name is None or \
                    ctx.get_parameter_source(param.name) is not ParameterSource.ENVIRONMENT:
                raise
            click.echo(f"headgate: error: {param.envvar} must be one of "
                       f"{', '.join(self.choices)}, got {value!r}", err=True)
            ctx.exit(EXIT_USAGE)


LOG_LEVELS = _EnvChoice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)

log_level_option = click.option(
    "--log-level",
    default="INFO",
    envvar="HG_LOG_LEVEL",
    show_envvar=True,
    show_default=True,
    type=LOG_LEVELS,
    help="Level of headgate's log lines (stderr).",
)


log_format_option = click.option(
    "--log-format",
    default="text",
    envvar="HG_LOG_FORMAT",
    show_envvar=True,
    show_default=True,
    type=_EnvChoice(["text", "json"], case_sensitive=False),
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
    from headgate.services.server import InProcessWorker, ServerConfig

    settings = _settings(store_url, migrate)
    addr = _bind_addr(settings, addr)
    if workers and app_ref is None:
        _fail("--workers needs --app MODULE:FACTORY (a callable taking a store and "
              "returning a Worker)")
    if app_ref is not None and not workers:
        _fail("--app needs --workers N")
    pool = InProcessWorker(app_ref, workers, drain_ms) if app_ref is not None else None
    _configure_logging(log_level, log_format.lower())
    _serve(ServerConfig(replace(settings, api_addr=addr), threads, duties, pool,
                        store_source=store_source(store_url)))


def _served_app(settings: Settings, *, background: bool) -> ServedApp:
    """serve's app: ``create_app``, its store opened now, and the API's producer (the
    duties fire periodic jobs through it)."""
    from headgate.api.context import api_state
    from headgate.services.server import ServedApp
    from headgate.web import begin_stopping, create_app, get_store

    app = create_app(config=settings, background=background)
    store = get_store(app)
    return ServedApp(app, store, api_state(app).producer(store),
                     stopping=lambda: begin_stopping(app))


def _serve(config: ServerConfig) -> NoReturn:
    from headgate.services import server

    try:
        code = server.run_server(config, _served_app)
    except StoreUnavailable as exc:
        _store_failed(exc)
    except ConfigError as exc:
        _fail(str(exc))
    click.get_current_context().exit(code)


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
        store.close()
    click.echo(f"{redact_url(url)}: schema version {version}")


@main.command()
@click.option("--app", "app", default=None, metavar="MODULE:OBJ",
              help="A headgate.App, a Worker, or a callable taking a store and returning "
                   "a Worker. Required, unless --django.")
@click.option("--django", "django", is_flag=False, flag_value="default", default=None,
              metavar="[ALIAS]",
              help="Instead of --app: run the Django tasks of settings.TASKS[ALIAS] "
                   "(default: default), as `manage.py headgate_worker` does; Django is set "
                   "up from DJANGO_SETTINGS_MODULE, the current directory importable.")
@click.option("--store", "store_url", default=None, metavar="URL",
              help=STORE_HELP + " An App made with a store of its own (App(url)) runs on "
                   "it, and refuses a --store or $HG_STORE naming another database.")
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
              type=LOG_LEVELS, help="INFO logs one line per job outcome.")
@log_format_option
@migrate_option
def worker(app: str | None, django: str | None, store_url: str | None,
           queues: str | None, concurrency: int | None,
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

    if app is not None and django is not None:
        _fail("--app and --django are alternatives: give one")
    if app is None and django is None:
        _fail("--app MODULE:OBJ is required (or --django for a Django project's tasks)")
    _configure_logging(log_level, log_format.lower())
    overrides: dict[str, Any] = {
        "store_url": store_url, "queues": queues, "concurrency": concurrency,
        "lease_ms": lease_ms, "drain_ms": drain_ms, "duties": duties, "isolated": isolated,
        "worker_id": worker_id, "migrate": migrate}
    try:
        if app is not None:
            code = run_worker(app, **overrides)
        else:
            code = _django_runner()(django, **overrides)
    except StoreUnavailable as exc:
        _store_failed(exc)
    except (ConfigError, ValueError, InvalidInput) as exc:
        _fail(str(exc))
    click.get_current_context().exit(code)


def _django_runner() -> Callable[..., int]:
    """``run_backend_worker``, imported only for ``--django`` (an optional extra)."""
    try:
        from headgate.contrib.django.worker import run_backend_worker
    except ImportError as exc:
        _fail(f"--django needs headgate-queue[django] (Django and its tasks framework): {exc}")
    return run_backend_worker


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
    from headgate.services.server import ServerConfig

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
        _serve(ServerConfig(replace(settings, api_addr=addr), store_source="--db"))
    finally:
        if fleet is not None:
            fleet.terminate()
            fleet.wait(timeout=15)


# `headgate bench NAME …`: the repository's benchmarks (bench/), which stay scripts so
# they can import the peer harness by path and run without the package installed. A
# wheel ships no bench/, so an installed headgate does not offer the command at all.
BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
BENCHMARKS = {
    "api": "api.py",
    "engine": "engine.py",
    "forecast": "forecast.py",
    "fuzz_api": "fuzz_api.py",
    "held_snapshot": "held_snapshot.py",
    "http": "http.py",
    "http_workers": "http_workers.py",
    "import_time": "import_time.py",
    "inspect": "inspection.py",
    "keyed": "keyed.py",
    "limits": "limits.py",
    "long_horizon": "long_horizon.py",
    "memory": "memory.py",
    "peers": "peers_headgate.py",
    "reliability": "reliability.py",
    "sqlite_writers": "sqlite_writers.py",
    "wal": "wal.py",
    "worker": "worker.py",
}


@click.command(context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.argument("name", type=click.Choice(sorted(BENCHMARKS)))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(name: str, args: tuple[str, ...]) -> None:
    """Run one of the benchmarks in the checkout's bench/ folder (JSON medians on
    stdout); ARGS go to it (`headgate bench engine --help`). bench/compare.sh runs
    headgate beside the peers. Exit codes: the benchmark's, 2 when its script is gone."""
    import subprocess
    import sys

    script = BENCH_DIR / BENCHMARKS[name]
    if not script.exists():
        _fail(f"{script} not found: benchmarks run from a headgate checkout")
    code = subprocess.call([sys.executable, str(script), *args], cwd=script.parent.parent)
    click.get_current_context().exit(code)


if BENCH_DIR.is_dir() and (BENCH_DIR.parent / "pyproject.toml").is_file():
    main.add_command(bench)


if __name__ == "__main__":  # `python -m headgate.cli`, as `python -m headgate`
    main()
