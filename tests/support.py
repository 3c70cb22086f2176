"""Helpers several test modules share: polling for a condition, the `headgate` command
of this interpreter, PostgreSQL databases for tests and pg_ctl on the throw-away cluster
scripts/test.sh sets up, the statements a SQLite store runs with their query plans, the
console app the console tests drive (served on a real socket, its threads stopped after),
and a TCP relay that loses answers on purpose.
Tests import helpers from here, never from a conftest.py: every folder's conftest is a
module named `conftest`, and the last one imported would answer for all of them."""

from __future__ import annotations

import importlib.util
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import flask
from werkzeug.serving import make_server

import headgate.api
import headgate.dashboard
from headgate import Client, Envelope, open_store
from headgate.core import Outcome
from headgate.core.job import AckRequest
from headgate.services.config import Settings
from headgate.web import create_app

# -- PostgreSQL for tests: HG_TEST_PG names a server tests may create databases on ------

PG_ENV = "HG_TEST_PG"


def pg_available() -> bool:
    if not os.environ.get(PG_ENV):
        return False
    try:
        return importlib.util.find_spec("headgate.adapters.postgres") is not None
    except ImportError:
        return False


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def pg_database(template: str | None = None) -> Iterator[str]:
    """Create `hg_<random>` on the HG_TEST_PG server, empty or (`template`, a pg_template
    name) a copy of that migrated database; yield its URL, drop it."""
    import psycopg  # only needed (and only imported) when PostgreSQL runs

    admin_url = os.environ[PG_ENV]
    name = f"hg_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if template is None:
            conn.execute(f'CREATE DATABASE "{name}"')
        else:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"{_copy_strategy(conn)}')
    try:
        yield with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _copy_strategy(conn: Any) -> str:
    """FILE_COPY on PostgreSQL 15+: it copies a database this small in about two thirds
    of the default WAL_LOG's time (which writes every page to the WAL). Older servers
    have only the file copy and no STRATEGY option."""
    return " STRATEGY FILE_COPY" if conn.info.server_version >= 150000 else ""


def pg_template() -> Iterator[str]:
    """Create a database on the HG_TEST_PG server, migrate it with this checkout's
    schema, yield its name for pg_database to copy, drop it.

    Copying it costs about two thirds of creating a database and migrating it. Made
    once a test session by each test process for itself (under a name of its own, as
    pytest-xdist workers run side by side), so it always holds the migrations the tests
    run with. CREATE DATABASE … TEMPLATE refuses a source anyone is connected to,
    so once migrated it takes no connections, and its store's sessions are waited out."""
    import psycopg

    admin_url = os.environ[PG_ENV]
    name = f"hg_template_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        open_store(with_database(admin_url, name)).close()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
            # A closed connection's server process ends a moment after the client's.
            wait_for(lambda: conn.execute("SELECT count(*) = 0 FROM pg_stat_activity "
                                          "WHERE datname = %s", (name,)).fetchone()[0],
                     10, f"the sessions on {name} to end")
        yield name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# Fixtures that open the test's database with migrations on before its body runs (each
# of their definitions does, module overrides included: a fixture of one of these names
# that leaves the database unmigrated needs another name). For a test that asks for one,
# a database copied from the migrated template is the one it would have seen; copying
# costs less than migrating.
MIGRATED_BEFORE_BODY = frozenset({"store", "pg_store", "api"})


def fresh_pg_database(request: Any) -> Iterator[str]:
    """pg_database() for the test of `request` (a pytest FixtureRequest): a copy of the
    session's migrated template (the `pg_template` fixture) when the test's database is
    migrated before its body anyway, else an empty one, as a test of migrating needs."""
    template = None
    if MIGRATED_BEFORE_BODY & set(request.fixturenames):
        template = request.getfixturevalue("pg_template")
    yield from pg_database(template)


def pg_statements_sent(store: Any, call: Callable[[], Any]) -> int:
    """Run `call` with libpq tracing the pool's only connection (a store opened with
    pool_max=1); the statements it ran: a Bind each (extended protocol), where a
    statement prepared on its fifth run adds a Parse and a Sync but no Bind."""
    import tempfile

    from psycopg.pq import Trace

    with tempfile.TemporaryFile("w+") as trace:
        with store.db.pool.connection() as raw:
            raw.pgconn.trace(trace.fileno())
            raw.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
        try:
            call()
        finally:
            with store.db.pool.connection() as raw:
                raw.pgconn.untrace()
        trace.seek(0)
        return sum(1 for line in trace if line.startswith("F\t") and "\tBind" in line)


def hold_snapshot(conn: Any) -> None:
    """Open a REPEATABLE READ transaction on `conn` and take its snapshot: vacuum keeps
    every row version written after it until `conn` ends the transaction."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    conn.execute("SELECT count(*) FROM jobs").fetchone()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
             interval: float = 0.02) -> Any:
    """Poll until `predicate()` is truthy; its value. Fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


def pg_ctl(*args: str) -> None:
    """pg_ctl on the test cluster, as the OS user that owns it (as test.sh set it up)."""
    bin_dir = os.environ["HG_TEST_PG_BIN"]
    data = os.environ["HG_TEST_PG_DATA"]
    user = os.environ.get("HG_TEST_PG_OSUSER", "")
    cmd = [f"{bin_dir}/pg_ctl", "-D", data, *args]
    if os.geteuid() == 0 and user and user != "root":
        cmd = ["runuser", "-u", user, "--", *cmd]
    subprocess.run(cmd, check=True, cwd="/tmp", capture_output=True, timeout=60)


def headgate_cmd() -> list[str]:
    """The console script installed next to this interpreter, else the module."""
    script = Path(sys.executable).with_name("headgate")
    return [str(script)] if script.exists() else [sys.executable, "-m", "headgate.cli"]


@contextmanager
def traced(store: Any) -> Iterator[list[str]]:
    """The SQL (values bound) a SQLite store runs in this thread inside the block."""
    statements: list[str] = []
    conn = store.db.connection()
    conn.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        conn.set_trace_callback(None)


def query_plan(path: str | Path, sql: str) -> str:
    """SQLite's plan for `sql` on the database file at `path`, its steps joined by |."""
    with closing(sqlite3.connect(path)) as conn:
        return " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql))


def jobs_index_reads(store: Any) -> dict[str, int]:
    """Tuples read from each index of `jobs`, as counted for the store's sessions so far.
    The store's own session flushes its pending counts first, so open the store with
    pool_max=1 for the figures to include its latest statements."""
    with store.db.read() as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        return dict(conn.execute("SELECT indexrelname, idx_tup_read FROM pg_stat_user_indexes "
                                 "WHERE relname = 'jobs'").fetchall())


def jobs_index_reads_since(store: Any, before: dict[str, int]) -> dict[str, int]:
    """Tuples read from each index of `jobs` since `before` (a jobs_index_reads answer)."""
    after = jobs_index_reads(store)
    return {name: after[name] - before.get(name, 0) for name in after}


def tenants_came_and_went(store: Any, queue: str, n: int) -> None:
    """`n` partitions (`t00000`…) that each held one job, all run and gone (retention 0):
    a queue of short-lived tenants, whose partition rows only tidying removes."""
    Client(store).enqueue_many([Envelope(kind="work", payload=b"", queue=queue,
                                         retention_ms=0, partition_key=f"t{i:05d}")
                                for i in range(n)])
    while claims := store.admit("w", [queue], 500, 60_000):
        store.ack_many([AckRequest(c, Outcome.SUCCESS) for c in claims])


def console_app(store: Any, db: str, **settings: Any) -> flask.Flask:
    """The console and API over `store` in Flask's testing mode (`db`: the SQLite file
    the settings name), `settings` replacing the defaults' fields."""
    app = create_app(store, config=replace(Settings(sqlite_path=db), **settings),
                     background=False)
    app.config["TESTING"] = True
    return app


def stop_app(app: flask.Flask) -> None:
    """Stop the threads `app` started: the API's event broadcaster and operations runner,
    the console's live hub and its sockets' readers. The process goes on after a test,
    so they would too (tests/conftest.py fails a test that leaves one running)."""
    headgate.api.shutdown(app)
    headgate.dashboard.shutdown(app)


@contextmanager
def serving(app: flask.Flask) -> Iterator[int]:
    """`app` on a real socket (werkzeug's server, a thread per request, WebSockets too):
    its port. On the way out the app's threads are stopped, then the server."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01},
                              daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        try:
            stop_app(app)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)


class TcpRelay:
    """A TCP relay on 127.0.0.1 in front of `target`: each connection it accepts is
    paired with one to the target and carried both ways, so a test can lose what the
    target answers (a lost answer, a network failure) while the target carries on.
    Subclasses decide with `accepting()` (False: a new connection is closed at once, as
    by a server that is down) and `on_answer(n)` for the n-th connection's answers: FORWARD
    them, SWALLOW them (the connection stays open) or CUT the connection."""

    FORWARD, SWALLOW, CUT = "forward", "swallow", "cut"

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.accepted = 0
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def accepting(self) -> bool:
        return True

    def on_answer(self, n: int) -> str:
        return self.FORWARD

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.accepting():
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                n, self.accepted = self.accepted, self.accepted + 1
                self._socks += [client, server]
            threading.Thread(target=self._pump, args=(client, server, None),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, n),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers_of: int | None) -> None:
        try:
            while data := src.recv(65536):
                verdict = self.FORWARD if answers_of is None else self.on_answer(answers_of)
                if verdict == self.CUT:
                    break
                if verdict == self.FORWARD:
                    dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Every open connection closed; new ones are carried again."""
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()
