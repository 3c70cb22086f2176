"""``App``: the task layer (docs/tasks.md) over ``Client`` and ``Worker``.

::

    app = headgate.App("sqlite:///jobs.db")      # App(url) | App(store=...) | App() (HG_*)

    @app.task(queue="emails", retry=headgate.Backoff(base_ms=1_000, max_ms=60_000))
    def send_email(to: str, subject: str) -> dict: ...

    ref = send_email.enqueue("a@example.com", subject="hi")
    ref.result(timeout=10)

The store opens on first use (so importing a module that builds an App costs nothing,
and ``headgate worker --app mod:app`` can hand it the store it opened). A task's kind is
its import path (``module.qualname``) unless named: a module run as ``__main__`` names
its tasks ``__main__.…``, a kind no worker process has, so enqueueing one raises
``UnimportableTask``: import the task from its module, or name it.

Worker and server start-up (``build_worker``) upsert the schedules declared with
``@app.periodic``: an unchanged spec keeps its ``next_run_ms``, and a schedule an
operator paused stays paused. Schedules not declared in code are left alone unless
``periodic_prune`` is set, which deletes every schedule the app does not declare.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from headgate.core import EnqueueForbidden, Envelope, InvalidInput, schedule_spec
from headgate.services.client import DEFAULT_CONTEXT, Client, chain
from headgate.services.client import Middleware as ProducerMiddleware
from headgate.services.config import (
    ConfigError,
    Settings,
    display_store_url,
    names_a_store,
    redact_url,
    same_store,
    store_source,
    url_of_store,
)
from headgate.services.http_client import HttpClient
from headgate.store import open_store
from headgate.store.port import Store
from headgate.worker import Worker
from headgate.worker.observe import AttemptHook

from .codec import JSON, Codec
from .ref import JobRef
from .retry import RetryPolicy, check_policy
from .run import DEFAULT_RETRY, Middleware, decoder_for, make_handler
from .task import TASK_DEFAULTS, Task, TaskCall, check_options
from .testing import TestSession

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M", bound=Callable[..., Any])

SCHEDULE_OPTIONS = ("on_missed", "backfill_limit")
# Schedule fields the app compares before writing (the rest are the store's).
SCHEDULE_KEYS = ("kind", "payload", "queue", "partition_key", "rate_class", "priority",
                 "max_attempts", "retention_ms", "spec", "on_missed", "backfill_limit")


def worker_runs_coroutines(worker: Worker) -> bool:
    """Whether the worker awaits ``async def`` handlers on a loop of its own."""
    return bool(getattr(worker, "runs_coroutines", False))


class TaskDecorator(Protocol):
    """``@app.task(...)``: keeps an ``async def``'s awaited type as the result type."""

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


class App:
    # Added to the wall clock where a call's delay_ms starts: app.testing()'s advance()
    # moves it with its store's clock, so a delay counts from the session's time.
    clock_offset_ms = 0

    def __init__(self, url: str | None = None, *, store: Store | None = None,
                 codec: Codec = JSON, periodic_prune: bool = False,
                 token: str | None = None) -> None:
        if url is not None and store is not None:
            raise InvalidInput("give App a store URL or a store, not both")
        self.url = url
        # An http(s):// URL: producers enqueue and wait through the server's /api/v1
        # (no database access); a worker of this app still opens a store (--store/HG_*).
        self._http: HttpClient | None = None
        if url is not None and url.startswith(("http://", "https://")):
            self._http = HttpClient(url, token=token)
        elif token is not None:
            raise InvalidInput("token= is for an App given an http(s):// server URL")
        self.codec = codec
        self.periodic_prune = periodic_prune
        self._store = store
        self._owns_store = False
        # The database a given store is (None for a store of unknown kind), which a
        # command's --store/HG_* must agree with.
        self._given_store_url = url_of_store(store) if store is not None else None
        self._client: Client | None = None
        # Observers (headgate.contrib.otel.instrument fills them): the producer
        # middleware runs around every enqueue of the app (Client's signature, also over
        # HTTP and asyncio), the attempt hooks on every worker the app's tasks run in.
        self.producer_middleware: list[ProducerMiddleware] = []
        self.attempt_hooks: list[AttemptHook] = []
        if self._http is not None:
            self._http.middleware = self.producer_middleware
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._middleware: list[Middleware] = []
        self._schedules: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # -- the store -------------------------------------------------------------------
    def settings(self, store_url: str | None = None) -> Settings:
        """Where this app's store is: ``store_url``, else the app's URL, else
        HG_STORE/HG_SQLITE/HG_PG. An http(s):// app has no store of its own: without
        one of those its worker would drain a fresh SQLite file in the working directory
        that nothing enqueues to, so that is a ConfigError instead."""
        settings = Settings.from_env()
        if store_url:
            return settings.with_store_url(store_url)
        if self._http is None:
            return settings.with_store_url(self.url) if self.url else settings
        if not names_a_store():
            raise ConfigError(
                f"App({self.url!r}) enqueues through that server and has no store of its "
                "own; give its worker one (--store URL, HG_STORE, HG_SQLITE or HG_PG)")
        return settings

    def own_store_url(self) -> str | None:
        """The store this app was made with: ``App(url)``'s URL, or the URL of the store
        given as ``App(store=...)``; None for ``App()``, which takes its command's (or
        the environment's) store, and for an http(s):// app."""
        if self._http is None and self.url:
            return self.url
        return self._given_store_url

    def command_settings(self, store_url: str | None = None, source: str | None = None
                         ) -> Settings:
        """The store a command (``headgate worker``, ``serve --workers``) runs this app
        on. The command's store is ``store_url`` (``--store``; ``source`` says where it
        came from), else HG_STORE/HG_SQLITE/HG_PG when set. An app made with a store
        of its own (``own_store_url``) runs on it, and a command's store naming another
        database is a ConfigError naming both: the worker would otherwise drain a
        database the app's producers never write to. ``App()`` takes the command's."""
        own = self.own_store_url()
        if own is None:
            return self.settings(store_url)
        settings = Settings.from_env().with_store_url(own, "App(url)")
        if store_url:
            source = source or store_source(store_url)
            command = Settings.from_env().with_store_url(store_url, source).store_url()
        elif names_a_store():
            command, source = Settings.from_env().store_url(), store_source(None)
        else:
            return settings
        if not same_store(command, own):
            made = f"App({redact_url(own)!r})" if own == self.url else "App(store=...)"
            raise ConfigError(
                f"the command's store {display_store_url(command)} (from {source}) is not "
                f"the app's own {display_store_url(own)} (from {made}): name one database, "
                "or make the app App() to take the command's store")
        return settings

    @property
    def store(self) -> Store:
        if self._store is None:
            with self._lock:
                if self._store is None:
                    settings = self.settings()
                    self._store = open_store(settings.store_url(),
                                             **settings.store_options())
                    self._owns_store = True
        return self._store

    @property
    def client(self) -> Client | HttpClient:
        """The producer the app enqueues through (its middleware and hooks apply): the
        server's API for an http(s):// app."""
        if self._http is not None:
            return self._http
        if self._client is None or self._client.store is not self.store:
            self._client = Client(self.store)
            self._client.middleware = self.producer_middleware  # shared: later ones apply
        return self._client

    @property
    def _results(self) -> Any:
        """Where JobRefs read jobs and results: the server for an http(s):// app."""
        return self._http if self._http is not None else self.store

    def use_store(self, store: Store) -> None:
        """Work on ``store`` from now on (the worker launcher hands over the one it
        opened). A store the app opened itself is closed."""
        with self._lock:
            if self._store is not None and self._owns_store and self._store is not store:
                self._store.close()
            self._store, self._owns_store, self._client = store, False, None

    def close(self) -> None:
        """Close the store if the app opened it."""
        with self._lock:
            if self._store is not None and self._owns_store:
                self._store.close()
                self._store, self._owns_store = None, False

    # -- declaring ---------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, fn: None = None, /, *, name: str | None = None, queue: str = "default",
        rate_class: str = "", max_attempts: int = 25, retry: RetryPolicy = ...,
        retry_on: Sequence[type[BaseException]] | None = None,
        partition: Callable[..., str] | None = None, timeout_ms: int | None = None,
        deadline_ms: int | None = None, codec: Codec | None = None, **defaults: Any,
    ) -> TaskDecorator: ...

    def task(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Declare a task: ``@app.task`` or ``@app.task(queue=..., ...)``.

        ``name`` (the kind; default the import path), ``queue``, ``rate_class``,
        ``max_attempts``, ``priority``, ``retention_ms``, ``weight``, ``tags``,
        ``headers``, ... (envelope defaults for every call), ``retry`` (see
        ``headgate.tasks.retry``), ``retry_on``, ``partition`` (``f(*args, **kwargs) ->
        str``, the fairness key of each call), ``timeout_ms`` / ``deadline_ms`` (the
        worker's, per attempt / per job) and ``codec``."""
        if fn is not None:
            return self._declare(fn, options)
        return lambda f: self._declare(f, options)

    def _declare(self, fn: Callable[..., Any], options: Mapping[str, Any]) -> Task[Any, Any]:
        if not callable(fn):
            raise TypeError("@app.task decorates a function")
        options = dict(options)
        name = options.pop("name", None) or f"{fn.__module__}.{fn.__qualname__}"
        codec = options.pop("codec", None) or self.codec
        partition = options.pop("partition", None)
        retry = options.pop("retry", DEFAULT_RETRY)
        retry_on = options.pop("retry_on", None)
        timeout_ms = options.pop("timeout_ms", None)
        deadline_ms = options.pop("deadline_ms", None)
        check_options(options, TASK_DEFAULTS, "@app.task")
        if retry is not DEFAULT_RETRY:
            check_policy(retry)
        if retry_on is not None:
            retry_on = tuple(retry_on)
            if not all(isinstance(t, type) and issubclass(t, BaseException) for t in retry_on):
                raise InvalidInput("retry_on must be exception classes")
        if partition is not None and not callable(partition):
            raise InvalidInput("partition must be a callable returning a string")
        task: Task[Any, Any] = Task(
            self, fn, name=name, codec=codec, partition=partition, retry=retry,
            retry_on=retry_on, timeout_ms=timeout_ms, deadline_ms=deadline_ms,
            defaults=options)
        with self._lock:
            if name in self._tasks:
                raise InvalidInput(f"a task named {name!r} is already declared on this app")
            self._tasks[name] = task
        return task

    def periodic(
        self, spec: str, *, id: str | None = None, on_missed: str = "skip",
        backfill_limit: int = 0, args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None, **task_options: Any,
    ) -> TaskDecorator:
        """Declare a task and a schedule that enqueues it: ``spec`` is ``@every:<ms>``
        or cron (5 or 6 fields, optional ``CRON_TZ=``; the grammar is in
        docs/ARCHITECTURE.md, Periodic schedules). The schedule's id defaults to the
        task's name; ``args``/``kwargs`` are the call each tick
        makes; ``queue``, ``partition_key``, ``rate_class``, ``priority``,
        ``max_attempts``, ``retention_ms`` and any ``@app.task`` option apply too."""
        schedule_spec.validate(spec)
        if "partition" in task_options:
            raise InvalidInput("a periodic task takes partition_key, not a partition callable")

        def declare(fn: Callable[..., Any]) -> Task[Any, Any]:
            task = self._declare(fn, task_options)
            try:  # each tick's call, checked now: it would fail every run in the worker
                try:
                    task._signature.bind(*args, **dict(kwargs or {}))
                except TypeError as exc:
                    raise TypeError(f"{task.name}: periodic args/kwargs: {exc}") from None
                payload = task.codec.encode_args(tuple(args), dict(kwargs or {}))
            except Exception:
                with self._lock:
                    self._tasks.pop(task.name, None)
                raise
            schedule = {
                "id": id or task.name, "kind": task.name, "payload": payload, "spec": spec,
                "on_missed": on_missed, "backfill_limit": backfill_limit,
                **{k: task.defaults[k] for k in ("queue", "partition_key", "rate_class",
                                                 "priority", "max_attempts", "retention_ms")
                   if k in task.defaults},
            }
            with self._lock:
                if schedule["id"] in self._schedules:
                    self._tasks.pop(task.name, None)
                    raise InvalidInput(f"a schedule with id {schedule['id']!r} is already "
                                       "declared on this app")
                self._schedules[schedule["id"]] = schedule
            return task

        return declare  # type: ignore[return-value]

    def middleware(self, fn: M) -> M:
        """Register ``fn(run, call_next)`` around every task run, outermost first in
        registration order. ``call_next()`` runs the rest of the chain and the task and
        returns its value or raises its exception; ``fn`` returns (or raises) what the
        run gives. Plain or ``async def`` (``await call_next()``)."""
        if not callable(fn):
            raise TypeError("@app.middleware decorates a callable (run, call_next)")
        self._middleware.append(fn)
        return fn

    @property
    def tasks(self) -> dict[str, Task[Any, Any]]:
        return dict(self._tasks)

    @property
    def schedules(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in self._schedules.items()}

    def queues(self) -> list[str]:
        """Every queue a declared task runs on by default."""
        return sorted({t.defaults.get("queue", "default") for t in self._tasks.values()}
                      | {s.get("queue", "default") for s in self._schedules.values()})

    # -- producing ----------------------------------------------------------------------
    def ref(self, job_id: str, task: Task[Any, R] | None = None) -> JobRef[Any]:
        """A handle on an existing job (e.g. an id kept in a database)."""
        return JobRef(self._results, job_id, task.codec if task is not None else self.codec)

    def enqueue_many(self, calls: Iterable[TaskCall[Any]], *, conn: Any = None
                     ) -> list[JobRef[Any]]:
        """Every call in one transaction, all or nothing (``conn``: the caller's)."""
        calls = self._own(calls)
        ids = self.client.enqueue_many([c.envelope for c in calls], conn=conn)
        return [JobRef(self._results, i, c.task.codec) for i, c in zip(ids, calls, strict=True)]

    async def enqueue_many_async(self, calls: Iterable[TaskCall[Any]], *, conn: Any = None
                                 ) -> list[JobRef[Any]]:
        """asyncio producers. PostgreSQL: psycopg's AsyncConnection from the store's async
        pool (opened on first use), or inside ``conn`` (an AsyncConnection) for a
        transactional enqueue. SQLite: the synchronous enqueue, run in a thread. The
        client's authorizer runs; its (synchronous) middleware and hooks do not."""
        calls = self._own(calls)
        if self._http is not None:
            ids = await self._http.enqueue_many_async([c.envelope for c in calls], conn=conn)
            return [JobRef(self._results, i, c.task.codec) for i, c in zip(ids, calls, strict=True)]
        client = self.client
        assert isinstance(client, Client)
        envs = [c.envelope.validated() for c in calls]
        for env in envs:
            if not client.authorizer(DEFAULT_CONTEXT, env):
                raise EnqueueForbidden(env.kind)
        if self.producer_middleware:
            ids = await self._through_middleware_async(envs, conn)
        else:
            ids = await self.store.enqueue_many_async(envs, conn=conn)
        return [JobRef(self._results, i, c.task.codec) for i, c in zip(ids, calls, strict=True)]

    async def _through_middleware_async(self, envs: list[Envelope], conn: Any) -> list[str]:
        """The (synchronous) producer middleware in a thread whose insert awaits the
        store's asyncio enqueue on this loop; the thread gets the caller's context (a
        tracing span's parent)."""
        loop = asyncio.get_running_loop()
        store = self.store

        def insert(batch: list[Envelope]) -> list[str]:
            return asyncio.run_coroutine_threadsafe(
                store.enqueue_many_async([e.validated() for e in batch], conn=conn),
                loop).result()

        return await asyncio.to_thread(chain(self.producer_middleware, DEFAULT_CONTEXT, insert),
                                       envs)

    def _own(self, calls: Iterable[TaskCall[Any]]) -> list[TaskCall[Any]]:
        calls = list(calls)
        for c in calls:
            if not isinstance(c, TaskCall):
                raise TypeError(f"enqueue_many takes task.call(...) values, got "
                                f"{type(c).__name__}")
            if c.task.app is not self:
                raise InvalidInput(f"{c.task.name} belongs to another App")
            c.task.check_importable()
        return calls

    # -- running ------------------------------------------------------------------------
    def register(self, worker: Worker) -> None:
        """Register every task as a handler of ``worker`` (and the app's attempt hooks)."""
        for hook in self.attempt_hooks:
            worker.add_attempt_hook(hook)
        for task in self._tasks.values():
            handler = make_handler(task, self._middleware)
            if inspect.iscoroutinefunction(handler) and not worker_runs_coroutines(worker):
                # It would call the coroutine function, get a coroutine back and record a
                # success for a run that never happened.
                raise InvalidInput(f"{task.name} is async (or has async middleware), and "
                                   "this Worker does not run coroutine handlers")
            worker.register(task.name, handler, decoder=decoder_for(task),
                            timeout_ms=task.timeout_ms, deadline_ms=task.deadline_ms)

    def sync_schedules(self, store: Store | None = None) -> dict[str, list[str]]:
        """Upsert the declared schedules (unchanged ones are not written; an operator's
        pause is kept) and, with ``periodic_prune``, delete the undeclared ones. Returns
        ``{"upserted": [...], "pruned": [...]}``."""
        for declared in self._schedules.values():  # each tick would enqueue it
            self._tasks[declared["kind"]].check_importable()
        store = store or self.store
        upserted, pruned = [], []
        for sid, declared in self._schedules.items():
            existing = store.get_schedule(sid)
            stored = asdict(existing) if existing is not None else None
            if stored is not None and all(
                    stored[k] == declared.get(k, _DEFAULTS.get(k)) for k in SCHEDULE_KEYS):
                continue
            row = dict(declared)
            if existing is not None:
                row["paused"] = existing.paused
            store.upsert_schedule(row)
            upserted.append(sid)
        if self.periodic_prune:
            for found in store.list_schedules():
                if found.id not in self._schedules:
                    store.delete_schedule(found.id)
                    pruned.append(found.id)
        return {"upserted": upserted, "pruned": pruned}

    def worker(self, queues: Sequence[str] | None = None, concurrency: int = 10,
               **options: Any) -> Worker:
        """A Worker on this app's store running its tasks (default queues: the tasks'),
        after upserting the declared schedules. ``options`` go to ``Worker``."""
        return self._build(self.store, queues, concurrency, options)

    def build_worker(self, store_url: str | None = None, *, migrate: bool | None = None,
                     source: str | None = None) -> Worker:
        """What ``headgate worker --app mod:app`` and ``headgate serve --workers N
        --app mod:app`` call: open the store (``command_settings``: the app's own, else
        the command's, refusing two different ones), make it the app's, and return
        ``worker()``."""
        settings = self.command_settings(store_url, source)
        if migrate is not None:
            settings = replace(settings, migrate=migrate)
        store = open_store(settings.store_url(), **settings.store_options())
        self.use_store(store)
        self._owns_store = True
        return self._build(store, None, 10, {})

    def _build(self, store: Store, queues: Sequence[str] | None, concurrency: int,
               options: Mapping[str, Any]) -> Worker:
        self.sync_schedules(store)
        worker = Worker(store, queues=list(queues) if queues else self.queues() or ["default"],
                        concurrency=concurrency, **options)
        self.register(worker)
        return worker

    def testing(self, **options: Any) -> TestSession:
        """``with app.testing() as t:`` — see ``headgate.tasks.testing``."""
        return TestSession(self, **options)

    def swap_store(self, store: Store) -> Callable[[], None]:
        """Produce into `store` at its own clock until the returned call puts back the
        store, producer and clock the app had (what a test session does). An http(s)://
        app's server is set aside too, or a test's jobs would go to the real server."""
        saved = (self._store, self._owns_store, self._client, self._http,
                 self.clock_offset_ms)
        self._store, self._owns_store, self._client, self._http = store, False, None, None
        self.clock_offset_ms = 0

        def restore() -> None:
            (self._store, self._owns_store, self._client, self._http,
             self.clock_offset_ms) = saved

        return restore


_DEFAULTS: dict[str, Any] = {
    "queue": "default", "partition_key": "", "rate_class": "", "priority": 0,
    "max_attempts": 25, "retention_ms": 0, "on_missed": "skip", "backfill_limit": 0,
    "payload": b"",
}

__all__ = ["App", "TaskDecorator"]
