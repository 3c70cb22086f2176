"""Real-HTTP harness for the API tests: the Flask app on a real socket, a real store.

The server is werkzeug's, with a fixed thread pool (like gunicorn's gthread): SQLite
connections are per thread, so a thread per request would open one per request. Tests
talk to it with `requests`, exactly as a client would.
"""

from __future__ import annotations

import socket
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from support import stop_app
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler

import headgate
from headgate.services.config import Settings
from headgate.store.port import Store
from headgate.web import create_app


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:  # keep test output clean
        pass


class PoolServer(BaseWSGIServer):
    """werkzeug's server with a bounded worker pool instead of a thread per request."""

    def __init__(self, host: str, port: int, app: Any, threads: int = 32,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(host, port, app, handler=_QuietHandler, ssl_context=ssl_context)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="api-test")

    def process_request(self, request: Any, client_address: Any) -> None:
        self._pool.submit(self._handle, request, client_address)

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - a dropped client connection
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Api:
    """A running server plus a client that adds a fresh Idempotency-Key to mutations."""

    base: str
    store: Store
    app: Any
    session: requests.Session

    @property
    def url(self) -> str:
        return self.base + "/api/v1"

    def request(self, method: str, path: str, *, key: str | None | bool = True,
                headers: dict[str, str] | None = None, **kwargs: Any) -> requests.Response:
        headers = dict(headers or {})
        if method in ("POST", "PUT", "DELETE") and key is not False and key is not None:
            headers.setdefault("Idempotency-Key", uuid.uuid4().hex if key is True else key)
        if path.startswith("http"):
            full = path
        elif path.startswith(("/api/", "/metrics", "/readyz", "/healthz")):
            full = self.base + path
        else:
            full = self.url + path
        kwargs.setdefault("timeout", 30)
        return self.session.request(method, full, headers=headers, **kwargs)

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> requests.Response:
        return self.request("POST", path, **kw)

    def put(self, path: str, **kw: Any) -> requests.Response:
        return self.request("PUT", path, **kw)

    def delete(self, path: str, **kw: Any) -> requests.Response:
        return self.request("DELETE", path, **kw)

    def enqueue(self, kind: str = "email.send", payload: bytes = b"{}", **fields: Any) -> str:
        import base64

        body = {"kind": kind, "payload": base64.b64encode(payload).decode(), **fields}
        r = self.post("/jobs", json=body)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


class Servers:
    """Starts apps on real sockets and tears all of them down."""

    def __init__(self, store_url: str) -> None:
        self.store_url = store_url
        self._running: list[tuple[PoolServer, threading.Thread, Any, Store, bool]] = []

    def start(self, *, store: Store | None = None, settings: Settings | None = None,
              ssl_context: ssl.SSLContext | None = None, cafile: str | None = None,
              **app_kwargs: Any) -> Api:
        """`ssl_context`: serve HTTPS with it; the session trusts `cafile` alone (the
        environment's CA bundle would replace a session's own)."""
        own = store is None
        store = store if store is not None else headgate.open_store(self.store_url)
        app = create_app(store, config=settings or Settings(), **app_kwargs)
        server = PoolServer("127.0.0.1", free_port(), app, ssl_context=ssl_context)
        # serve_forever notices shutdown() between polls: each stop waited half a poll on
        # average, and every API test stops one.
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01},
                                  daemon=True)
        thread.start()
        self._running.append((server, thread, app, store, own))
        session = requests.Session()
        scheme = "http"
        if ssl_context is not None:
            scheme, session.verify, session.trust_env = "https", cafile or False, False
        return Api(f"{scheme}://127.0.0.1:{server.server_port}", store, app, session)

    def stop_all(self) -> None:
        for server, thread, app, store, own in reversed(self._running):
            stop_app(app)
            server.shutdown()
            server.server_close()
            thread.join(5)
            if own:
                store.close()
        self._running.clear()


@pytest.fixture
def servers(store_url: str) -> Iterator[Servers]:
    s = Servers(store_url)
    try:
        yield s
    finally:
        s.stop_all()


@pytest.fixture
def api(servers: Servers) -> Api:
    return servers.start()


@pytest.fixture
def make_api(servers: Servers) -> Callable[..., Api]:
    return servers.start
