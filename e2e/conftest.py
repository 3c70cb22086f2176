"""Browser tests: real headless Chromium (Debian's, never a downloaded build) against a
real `headgate serve` (gunicorn gthread, WebSockets and all) on a real SQLite file.

The database is seeded in-process with the demo data set before the server starts; the
server then owns it (tests that need to set something up use the API, or a second store
connection to the same file, as another process would).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

import headgate
from headgate.core.records import WorkerBeat
from headgate.dashboard.demo import Seeded, seed

CHROMIUM = os.environ.get("HG_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if Path(CHROMIUM).exists():
        return
    skip = pytest.mark.skip(reason=f"no Chromium at {CHROMIUM} (set HG_TEST_CHROMIUM)")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    base: str
    db: str
    proc: subprocess.Popen[bytes]
    seeded: Seeded

    def api(self, method: str, path: str, key: str | None = None, **kw: Any) -> Any:
        headers = kw.pop("headers", {})
        if method != "GET":
            headers["Idempotency-Key"] = key or os.urandom(8).hex()
        return requests.request(method, self.base + "/api/v1" + path, headers=headers,
                                timeout=10, **kw)


def start_server(db: str, seeded: Seeded, log: Path, **env: str) -> Server:
    # HG_API_ADDR in `env` pins the address (a restart on the same port); else a free one.
    port = int(env["HG_API_ADDR"].rsplit(":", 1)[1]) if "HG_API_ADDR" in env else free_port()
    # The caller's environment must not switch auth or read-only on by accident.
    environ = {k: v for k, v in os.environ.items()
               if k not in ("HG_API_TOKENS", "HG_API_READ_TOKENS", "HG_API_TOKENS_FILE",
                            "HG_READ_ONLY", "HG_UI_PREFIX")}
    environ.update(env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "headgate.cli", "serve", "--addr", f"127.0.0.1:{port}",
         "--store", f"sqlite:///{db}", "--threads", "24"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=environ,
        start_new_session=True,  # its own process group, for kill_server
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
        try:
            if requests.get(base + "/healthz", timeout=1).status_code == 200:
                return Server(base, db, proc, seeded)
        except requests.RequestException:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


def kill_server(server: Server) -> None:
    """kill -9 of the server's gunicorn master and worker: every connection drops at
    once, as when a server dies. Stopped with a signal instead, it waits while a page's
    live socket is open until gunicorn's graceful timeout (10 s) and then kills the
    worker all the same."""
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=15)


@pytest.fixture(scope="session")
def e2e_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Seeded]:
    db = str(tmp_path_factory.mktemp("e2e") / "console.db")
    store = headgate.open_store(f"sqlite:///{db}")
    try:
        seeded = seed(store)
        # A worker row, as a heartbeat makes it (no worker process needed to signal it).
        store.heartbeat(WorkerBeat("e2e-worker", host="e2e-host", pid=4242,
                                   queues=("emails", "webhooks"), concurrency=8, inflight=3,
                                   polls=120, empty_polls=30, status="running"))
    finally:
        store.close()
    return db, seeded


@pytest.fixture(scope="session")
def server(e2e_db: tuple[str, Seeded], tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    db, seeded = e2e_db
    srv = start_server(db, seeded, tmp_path_factory.mktemp("log") / "serve.log")
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def read_only_server(e2e_db: tuple[str, Seeded], server: Server,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    db, seeded = e2e_db
    srv = start_server(db, seeded, tmp_path_factory.mktemp("log-ro") / "serve.log",
                       HG_READ_ONLY="1")
    yield srv
    stop_server(srv)


# Per module: while open, the sync API keeps an asyncio loop running in this thread, so
# asyncio.run() in the tests/ files pytest-xdist runs after it in this process would fail.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(10_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def shot() -> Callable[[Any, str], None]:
    SCREENSHOTS.mkdir(exist_ok=True)

    def take(pg: Any, name: str, full_page: bool = True) -> None:
        pg.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)

    return take
