"""Security review, as tests (findings and the threat model in docs/SECURITY.md).

Each section proves one claim of docs/SECURITY.md from the outside, on a real store (and
on both backends where the database is what is being tested):

- read-only mode blocks every mutating API route and every console action;
- tokens: required off loopback, never from a query string, never logged, compared in
  constant time; a server nothing authenticates answers only loopback host names;
- CSRF: the sign-in form, the API's headers, the cookie's attributes, no CORS;
- no XSS through any stored string, in any page or live fragment;
- payloads hidden unless asked for, on every read path;
- SQL only with bound parameters (hostile filters on both backends, and a static check);
- request size limits and hostile URLs never 500;
- Idempotency-Key replays never cross callers;
- security headers on console pages;
- an enqueue-middleware failure is a JSON 500 that names it.

The browser-level half (no dialog ever fires) is e2e/test_security.py.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import html
import http.client
import inspect as pyinspect
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import pytest
import requests
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import serving, stop_app

import headgate
from headgate.api import auth as api_auth
from headgate.api.blueprint import READ_POSTS
from headgate.core import Outcome
from headgate.core.records import WorkerBeat
from headgate.dashboard import auth as console_auth
from headgate.dashboard import live
from headgate.dashboard.demo import Seeded, seed
from headgate.services.config import Settings
from headgate.services.scheduling import run_schedule_now
from headgate.web import create_app
from headgate.web.auth_throttle import FailedAttempts

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

ROOT = Path(__file__).resolve().parents[2]
MUTATING = ("POST", "PUT", "DELETE", "PATCH")


# -- helpers -------------------------------------------------------------------------------

@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    # For a <form>: the submit buttons inside it.
    submits: list[dict[str, str]] = field(default_factory=list)


class Page(HTMLParser):
    """Every element with its attributes, script bodies, and each form's submit buttons."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.scripts: list[str] = []
        self._forms: list[Element] = []
        self._in_script = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(el)
        if tag == "form":
            self._forms.append(el)
        elif tag == "button" and el.attrs.get("type") == "submit" and self._forms:
            self._forms[-1].submits.append(el.attrs)
        self._in_script = tag == "script"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self._in_script = False

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._forms:
            self._forms.pop()
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.scripts.append(data)

    def mutations(self) -> list[tuple[Element, str, str]]:
        """(element, METHOD, url) of every control that would change something."""
        out = []
        for el in self.elements:
            for verb in ("post", "put", "delete", "patch"):
                if f"hx-{verb}" in el.attrs:
                    out.append((el, verb.upper(), el.attrs[f"hx-{verb}"]))
        return out

    def meta(self, name: str, default: str | None = None) -> str:
        found = [e.attrs.get("content", "") for e in self.elements
                 if e.tag == "meta" and e.attrs.get("name") == name]
        if not found and default is not None:
            return default  # a fragment: the page around it carries the value
        assert found, name
        return found[0]


def make_app(store: Any, db: str = "", **settings: Any) -> Any:
    config = replace(Settings(sqlite_path=db or "unused.db"), **settings)
    app = create_app(store, config=config, background=False)
    app.config["TESTING"] = True
    return app


def text(resp: Any) -> str:
    return str(resp.get_data(as_text=True))


def sign_in(client: Any, token: str) -> str:
    """Sign the test client's session in; returns the page CSRF value."""
    page = text(client.get("/signin"))
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf, page
    resp = client.post("/signin", data={"token": token, "csrf": csrf.group(1)})
    assert resp.status_code == 302, text(resp)
    return Page(text(client.get("/"))).meta("hg-csrf")


def api_rules(app: Any) -> list[tuple[str, str, str]]:
    """(METHOD, path with placeholders filled, endpoint) of every /api/v1 rule."""
    out = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1"):
            continue
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", "x", rule.rule)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            out.append((method, path, rule.endpoint))
    return out


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "security.db")


@pytest.fixture
def sqlite_store(db: str) -> Iterator[Any]:
    s = headgate.open_store(f"sqlite:///{db}")
    yield s
    s.close()


@dataclass
class World:
    """The demo data set plus one job in every state the sheet distinguishes."""

    seeded: Seeded
    cancelled: str
    op_id: str
    worker: str = "sec-worker"

    def sheet_jobs(self) -> list[str]:
        s = self.seeded
        return [s.archived[0], s.running[0], s.scheduled[0], s.pending[0], s.completed[0],
                s.quarantined_job, s.rate_limited[0], self.cancelled]


def build_world(store: Any) -> World:
    seeded = seed(store)
    c = headgate.Client(store)
    cancelled = c.enqueue("sec.cancel_me", b"", queue="emails")
    store.operator_cancel(cancelled)
    store.heartbeat(WorkerBeat("sec-worker", host="h", pid=1, queues=("emails",), concurrency=2,
                               inflight=1, status="running"))
    op = store.create_operation("retry", {"state": "archived"}, dry_run=True)
    return World(seeded, cancelled, op.id)


def console_urls(world: World) -> list[str]:
    """Every console page and fragment with something on it to act on."""
    s = world.seeded
    urls = ["/", "/queues/emails", "/jobs", "/jobs?state=archived", "/jobs?queue=emails",
            "/rate-classes", "/rate-classes?edit=smtp", "/concurrency",
            "/partitions?queue=emails", "/quarantine", "/periodic",
            f"/periodic?edit={s.schedules[0]}", f"/periodic/{s.schedules[0]}", "/workers",
            "/cluster", f"/ops/{world.op_id}"]
    urls += [f"/jobs?job={quote(j, safe='')}" for j in world.sheet_jobs()]
    return urls


# -- 1. read-only mode ---------------------------------------------------------------------

def test_the_console_has_no_mutating_route_but_sign_in_and_out(sqlite_store: Any) -> None:
    app = make_app(sqlite_store)
    own = {(m, r.endpoint) for r in app.url_map.iter_rules()
           if not r.rule.startswith("/api/v1")
           for m in (r.methods or set()) - {"GET", "HEAD", "OPTIONS"}}
    assert own == {("POST", "dashboard.signin_post"), ("POST", "dashboard.signout")}


def test_read_only_mode_refuses_every_mutating_api_route_with_a_valid_request(
    sqlite_store: Any, db: str
) -> None:
    """Valid key, JSON body, even a valid token: 403 before any handler runs."""
    for config in ({"read_only": True}, {"read_only": True, "api_tokens": ("rw",)}):
        app = make_app(sqlite_store, db, **config)
        client = app.test_client()
        auth = {"Authorization": "Bearer rw"} if "api_tokens" in config else {}
        mutating = [(m, p) for m, p, e in api_rules(app)
                    if m in MUTATING and e not in READ_POSTS]  # a what-if changes nothing
        assert len(mutating) >= 24
        for method, path in mutating:
            resp = client.open(path, method=method, json={"kind": "k", "payload": ""},
                               headers={"Idempotency-Key": uuid.uuid4().hex, **auth})
            assert (resp.status_code, resp.get_json()) == (403, {"error": "read-only mode"}), \
                (method, path)
    assert sqlite_store.counts()["available"] == 0


def test_a_read_only_token_refuses_every_mutating_api_route(sqlite_store: Any, db: str) -> None:
    app = make_app(sqlite_store, db, api_tokens=("rw",), api_read_tokens=("ro",))
    client = app.test_client()
    for method, path, endpoint in api_rules(app):
        if method not in MUTATING:
            continue
        resp = client.open(path, method=method, json={},
                           headers={"Idempotency-Key": "k", "Authorization": "Bearer ro"})
        if endpoint in READ_POSTS:  # changes nothing: a reader may ask (here: a bad body)
            assert resp.status_code == 400, (method, path)
            continue
        assert (resp.status_code, resp.get_json()) == (403, {"error": "read-only token"}), \
            (method, path)


def _replay_controls(client: Any, urls: list[str], expect: dict[str, str]) -> set[str]:
    """Fetch every page, check each mutation control is disabled, then send what the
    control would send (as headgate.js does) and expect the API's refusal."""
    seen: set[str] = set()
    read_posts = {rule.rule for rule in client.application.url_map.iter_rules()
                  if rule.endpoint in READ_POSTS}
    csrf = Page(text(client.get("/"))).meta("hg-csrf")
    for url in urls:
        resp = client.get(url)
        assert resp.status_code == 200, (url, text(resp)[:300])
        page = Page(text(resp))
        csrf = page.meta("hg-csrf", csrf)
        for el, method, target in page.mutations():
            if target in read_posts:
                continue  # a what-if form asks, it changes nothing: allowed read-only
            if el.tag == "form":
                assert el.submits, (url, el.attrs)
                for button in el.submits:
                    assert "disabled" in button, (url, target, button)
            else:
                assert "disabled" in el.attrs, (url, el.tag, target)
            assert target.startswith("/api/v1/"), target
            body = json.loads(el.attrs.get("data-body") or "{}")
            path = re.sub(r"\{[a-z_]+\}", "x", target)
            answer = client.open(path, method=method, json=body, headers={
                "Idempotency-Key": uuid.uuid4().hex, "X-Headgate-CSRF": csrf})
            assert (answer.status_code, answer.get_json()) == (403, expect), \
                (url, method, target)
            seen.add(f"{method} {target}")
    return seen


def _settings_snapshot(store: Any) -> Any:
    return (store.counts(),
            [(q.queue, q.paused, q.weight, q.max_unfinished_jobs)
             for q in store.queue_stats()],
            [(r.name, r.paused, r.limit_per_window) for r in store.rate_classes()],
            store.concurrency_limits(), store.quarantine_list(),
            [(x.id, x.paused) for x in store.list_schedules()],
            [(w.worker_id, w.pending_signal) for w in store.list_workers(10**9)])


def test_read_only_mode_disables_every_console_action_and_the_api_refuses_each(
    sqlite_store: Any, db: str
) -> None:
    world = build_world(sqlite_store)
    client = make_app(sqlite_store, db, read_only=True).test_client()
    before = _settings_snapshot(sqlite_store)
    seen = _replay_controls(client, console_urls(world), {"error": "read-only mode"})
    assert _settings_snapshot(sqlite_store) == before  # nothing changed
    # The crawl reached the console's actions: queue, job, bulk, policy, periodic, worker.
    methods = " ".join(sorted(seen))
    for needle in ("/pause", "/retry", "/cancel", "/jobs/actions", "/jobs/bulk",
                   "/rate-classes/", "/concurrency-limits/", "/quarantine/", "/run",
                   "/periodic/", "/signal", "/enqueue-limit", "DELETE /api/v1/jobs/"):
        assert needle in methods, needle


def test_a_read_only_token_session_disables_every_console_action(sqlite_store: Any,
                                                                  db: str) -> None:
    world = build_world(sqlite_store)
    client = make_app(sqlite_store, db, api_tokens=("rw",),
                      api_read_tokens=("ro",)).test_client()
    sign_in(client, "ro")
    _replay_controls(client, console_urls(world), {"error": "read-only token"})


# -- 2. tokens -----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["serve", "demo"])
@pytest.mark.parametrize("addr,env,starts", [
    ("0.0.0.0:0", {}, False),
    ("192.0.2.7:0", {}, False),
    ("[::]:0", {}, False),
    ("headgate.internal:0", {}, False),  # a name is remote: DNS is not consulted
    ("0.0.0.0:0", {"HG_API_TOKENS": "t"}, True),
    ("0.0.0.0:0", {"HG_API_READ_TOKENS": "t"}, True),
    ("0.0.0.0:0", {"HG_API_ALLOW_REMOTE": "1"}, True),
    ("127.0.0.1:0", {}, True),
    ("localhost:0", {}, True),
    ("[::1]:0", {}, True),
])
def test_the_cli_refuses_a_non_loopback_bind_without_tokens(
    command: str, addr: str, env: dict[str, str], starts: bool, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import headgate.cli as cli
    import headgate.services.server as server

    started: list[Settings] = []
    monkeypatch.setattr(server, "run_server",
                        lambda config, build: started.append(config.settings) or 0)
    from headgate.dashboard import demo as demo_mod

    monkeypatch.setattr(demo_mod, "prepare", lambda *a, **k: (False, None))
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("HG_")}
    args = [command, "--addr", addr]
    args += (["--store", f"sqlite:///{tmp_path}/x.db"] if command == "serve"
             else ["--db", str(tmp_path / "d.db"), "--no-workers"])
    result = CliRunner().invoke(cli.main, args, env={**clean, **env})
    if starts:
        assert result.exit_code == 0, result.output
        assert [s.api_addr for s in started] == [addr]
    else:
        assert result.exit_code == 2, result.output
        assert "refusing to listen" in result.output and "HG_API_TOKENS" in result.output
        assert started == []


def test_tokens_are_never_accepted_in_a_query_string(sqlite_store: Any, db: str) -> None:
    app = make_app(sqlite_store, db, api_tokens=("secret-token-1",))
    client = app.test_client()
    good = {"Authorization": "Bearer secret-token-1"}
    for method, path, _ in api_rules(app):
        if path.endswith("/healthz") or path.endswith("/events"):
            continue
        for name in api_auth.QUERY_TOKEN_NAMES:
            for headers in ({}, good):  # not even beside a valid header
                resp = client.open(f"{path}?{name}=secret-token-1", method=method,
                                   headers={"Idempotency-Key": "k", **headers}, json={})
                assert resp.status_code == 401, (method, path, name)
                assert "not accepted in query strings" in resp.get_json()["error"]
    # The console does not sign a session in from a URL either.
    console = app.test_client()
    resp = console.get("/?token=secret-token-1")
    assert resp.status_code == 302 and "/signin" in resp.headers["Location"]
    assert console.get("/signin?token=secret-token-1").status_code == 200
    assert console.get("/", follow_redirects=False).status_code == 302


@pytest.mark.parametrize("presented", [
    "", " ", "s", "secret-token", "secret-token-", "secret-token-1x", "secret-token-2",
    "Secret-token-1", "secret-token-1 extra", "sécret-token-1", "x" * 4000,
    "secret-token-1\t",
])
def test_near_miss_tokens_of_every_length_are_refused(sqlite_store: Any, db: str,
                                                      presented: str) -> None:
    client = make_app(sqlite_store, db, api_tokens=("secret-token-1",)).test_client()
    header = "Bearer " + presented
    resp = client.get("/api/v1/queues", headers={"Authorization": header.encode("utf-8")
                                                 .decode("latin-1")})
    if presented.strip() == "secret-token-1":
        # Surrounding whitespace is not part of a token (HTTP trims header values).
        assert resp.status_code == 200
    else:
        assert (resp.status_code, resp.get_json()["error"]) in {
            (401, "invalid bearer token"), (401, "missing bearer token")}


def test_token_comparison_is_constant_time_over_every_configured_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tokens = api_auth.TokenSet((b"aaaa", b"bbbbbbbb", b"c"), (b"read-1", b"read-22"))
    calls: list[tuple[bytes, bytes]] = []
    real = api_auth.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(api_auth.hmac, "compare_digest", counting)
    for presented in ("aaaa", "read-22", "nope", "bbbbbbbbb", ""):
        calls.clear()
        tokens.match(presented)
        # No early exit on a match or on a length mismatch: every token is compared.
        assert len(calls) == 5, presented
    assert tokens.match("aaaa") == api_auth.Caller(
        "token:" + hashlib.sha256(b"aaaa").hexdigest()[:16], authenticated=True)
    assert tokens.match("read-22").read_only  # type: ignore[union-attr]
    # The code paths that compare secrets use compare_digest, never ==.
    for fn in (api_auth.TokenSet.match, console_auth.csrf_ok, console_auth.token_for_ref,
               console_auth.ConsoleSessionAuth._token_for):
        source = pyinspect.getsource(fn)
        assert "compare_digest" in source, fn
        assert not re.search(r"(token|candidate|expected|given|value)\s*==", source), fn


def test_tokens_never_reach_a_log_record(sqlite_store: Any, db: str,
                                         caplog: pytest.LogCaptureFixture) -> None:
    secret, reader = "tok-" + uuid.uuid4().hex, "ro-" + uuid.uuid4().hex
    caplog.set_level(logging.DEBUG)
    app = make_app(sqlite_store, db, api_tokens=(secret,), api_read_tokens=(reader,))
    client = app.test_client()
    for token in (secret, reader, secret + "x", secret[:-1]):
        for path in ("/api/v1/jobs", "/api/v1/nope", "/metrics"):
            client.get(path, headers={"Authorization": f"Bearer {token}"})
        client.post("/api/v1/jobs", json={"kind": "k", "payload": "!"},
                    headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "k"})
        client.get(f"/api/v1/jobs?access_token={token}")
    console = app.test_client()
    sign_in(console, secret)
    console.get("/jobs")
    logged = "\n".join(
        f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert secret not in logged and reader not in logged and secret[:-1] not in logged


def test_gunicorn_is_configured_without_an_access_log_or_header_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The serve process writes no access log; gunicorn's format, if an operator turns
    one on, names no request header (so never Authorization or Cookie)."""
    from gunicorn.app.base import BaseApplication

    from headgate.services import server

    captured: list[Any] = []
    monkeypatch.setattr(BaseApplication, "run", lambda self: captured.append(self.cfg))
    config = server.ServerConfig(Settings(api_tokens=("t",)), threads=2, duties=False)
    server.run_gunicorn(server.gunicorn_options(config), load=lambda: None)
    (cfg,) = captured
    assert cfg.accesslog is None
    fmt = cfg.access_log_format.lower()
    assert "}i" not in fmt and "authorization" not in fmt and "cookie" not in fmt


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    base: str
    log: Path
    proc: subprocess.Popen[bytes]
    token: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`headgate serve` (gunicorn, gthread) as an operator runs it, with a token."""
    tmp = tmp_path_factory.mktemp("serve")
    port = _free_port()
    token = "serve-token-" + uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env.update(HG_API_TOKENS=token, HG_SECRET_KEY="k" * 32)
    log = tmp / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "headgate.cli", "serve", "--addr", f"127.0.0.1:{port}",
         "--store", f"sqlite:///{tmp}/serve.db", "--threads", "4", "--no-duties"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if requests.get(base + "/healthz", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(log.read_text()[-2000:])
        time.sleep(0.1)
    yield Served(base, log, proc, token)
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_a_real_serve_process_never_writes_a_token_to_its_output(served: Served) -> None:
    good = {"Authorization": f"Bearer {served.token}"}
    near = served.token[:-1] + ("0" if served.token[-1] != "0" else "1")
    for headers in (good, {"Authorization": f"Bearer {near}"}, {}):
        requests.get(served.base + "/api/v1/jobs", headers=headers, timeout=10)
        requests.post(served.base + "/api/v1/jobs", json={"kind": "k", "payload": "%%"},
                      headers={**headers, "Idempotency-Key": "k"}, timeout=10)
        requests.get(served.base + "/metrics", headers=headers, timeout=10)
    requests.get(served.base + f"/api/v1/jobs?token={near}", timeout=10)
    s = requests.Session()
    page = s.get(served.base + "/signin", timeout=10).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    s.post(served.base + "/signin", data={"token": served.token, "csrf": csrf}, timeout=10)
    assert "Sign out" in s.get(served.base + "/", timeout=10).text
    time.sleep(0.3)
    output = served.log.read_text(errors="replace")
    assert served.token not in output and near not in output


def test_a_real_serve_process_caps_header_and_request_line_sizes(served: Served) -> None:
    """gunicorn's limits answer before the app (4094-byte request line, 8190-byte header
    field); a long-but-allowed query string is a clean 4xx/2xx from the app."""
    auth = {"Authorization": f"Bearer {served.token}"}
    r = requests.get(served.base + "/api/v1/jobs", headers={**auth, "X-Big": "a" * 20_000},
                     timeout=10)
    assert 400 <= r.status_code < 500
    r = requests.get(served.base + "/api/v1/jobs?q=" + "k" * 10_000, headers=auth, timeout=10)
    assert 400 <= r.status_code < 500
    many = {f"X-H{i}": "v" for i in range(150)}
    r = requests.get(served.base + "/api/v1/jobs", headers={**auth, **many}, timeout=10)
    assert 400 <= r.status_code < 500
    r = requests.get(served.base + "/api/v1/jobs?q=" + "k" * 3_000, headers=auth, timeout=10)
    assert r.status_code == 200
    tags = ",".join(f"t{i}" for i in range(400))
    r = requests.get(served.base + f"/api/v1/jobs?tags_any={tags}", headers=auth, timeout=10)
    assert (r.status_code, r.json()) == (400, {"error": "at most 100 tags in a filter"})
    r = requests.post(served.base + "/api/v1/jobs", data=b"{" + b" " * 3_000_000 + b"}",
                      headers={**auth, "Idempotency-Key": "big",
                               "Content-Type": "application/json"}, timeout=30)
    assert (r.status_code, r.json()) == (413, {"error": "request body too large"})
    assert requests.get(served.base + "/api/v1/readyz", headers=auth, timeout=10).ok


# -- 2b. a server nothing authenticates answers only loopback names ------------------------

@pytest.mark.parametrize("host,allowed", [
    ("127.0.0.1:8080", True), ("localhost:8080", True), ("LOCALHOST", True),
    ("app.localhost:8080", True), ("[::1]:8080", True), ("127.9.9.9", True),
    ("attacker.example:8080", False), ("127.0.0.1.nip.io", False), ("192.168.1.5:8080", False),
    ("localhost.attacker.example", False), ("0.0.0.0:8080", False),
])
def test_without_tokens_only_loopback_host_names_are_answered(
    sqlite_store: Any, db: str, host: str, allowed: bool
) -> None:
    """DNS rebinding: a page on attacker.example re-pointed at 127.0.0.1 would otherwise
    be same-origin with the unauthenticated console and API."""
    client = make_app(sqlite_store, db).test_client()
    for path in ("/api/v1/queues", "/", "/jobs"):
        resp = client.get(path, headers={"Host": host})
        assert (resp.status_code != 403) == allowed, (host, path, resp.status_code)
    resp = client.post("/api/v1/queues/q/pause",
                       headers={"Host": host, "Idempotency-Key": "k"})
    assert (resp.status_code == 204) == allowed
    if not allowed:
        assert "HG_API_TOKENS" in resp.get_json()["error"]
    # Liveness answers any name (load balancers); it reveals nothing.
    assert client.get("/healthz", headers={"Host": host}).status_code == 200
    assert client.get("/api/v1/healthz", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("config", [{"api_tokens": ("t",)}, {"allow_remote": True}])
def test_with_tokens_or_an_upstream_any_host_name_is_answered(
    sqlite_store: Any, db: str, config: dict[str, Any]
) -> None:
    client = make_app(sqlite_store, db, **config).test_client()
    resp = client.get("/api/v1/queues", headers={"Host": "queue.example.com",
                                                 "Authorization": "Bearer t"})
    assert resp.status_code == 200


def _ws_handshake(port: int, host: str, origin: str | None) -> int:
    """The status of a raw WebSocket handshake to /live."""
    lines = [
        "GET /live?page=overview HTTP/1.1", f"Host: {host}", "Upgrade: websocket",
        "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status = sock.recv(4096).split(b"\r\n", 1)[0]
    return int(status.split()[1])


def test_a_cross_origin_websocket_cannot_read_the_live_console(
    sqlite_store: Any, db: str
) -> None:
    """Browsers let any site open a WebSocket to 127.0.0.1 (no same-origin policy for
    WebSockets): without tokens the handshake must come from the console's own origin."""
    with serving(make_app(sqlite_store, db)) as port:
        here = f"127.0.0.1:{port}"
        assert _ws_handshake(port, here, f"http://{here}") == 101
        assert _ws_handshake(port, here, None) == 101  # not a browser: no CSRF vector
        assert _ws_handshake(port, here, "https://attacker.example") == 403
        assert _ws_handshake(port, here, "null") == 403
        assert _ws_handshake(port, here, f"http://127.0.0.1:{port + 1}") == 403
        assert _ws_handshake(port, "attacker.example", "http://attacker.example") == 403


# -- 3. CSRF -------------------------------------------------------------------------------

def test_the_sign_in_form_needs_its_own_sessions_csrf_value(sqlite_store: Any, db: str) -> None:
    app = make_app(sqlite_store, db, api_tokens=("tok",))
    victim, attacker = app.test_client(), app.test_client()
    attacker_csrf = re.search(r'name="csrf" value="([^"]+)"',
                              text(attacker.get("/signin"))).group(1)  # type: ignore
    victim.get("/signin")
    for data in ({"token": "tok"}, {"token": "tok", "csrf": ""},
                 {"token": "tok", "csrf": attacker_csrf}, {"token": "tok", "csrf": "x" * 43}):
        resp = victim.post("/signin", data=data)
        assert resp.status_code == 400, data  # login CSRF refused
        assert victim.get("/").status_code == 302  # still signed out
    # Sign-out needs it too (a forged sign-out leaves the session alone).
    csrf = sign_in(victim, "tok")
    assert victim.post("/signout", data={}).status_code == 302
    assert victim.get("/").status_code == 200
    assert victim.post("/signout", data={"csrf": csrf}).status_code == 302
    assert victim.get("/").status_code == 302


@pytest.mark.parametrize("target", ["/\\evil.example/", "//evil.example", "/\t/evil.example",
                                    "https://evil.example/", "javascript:alert(1)",
                                    "\\\\evil.example", "/%2F%2Fevil.example"])
def test_sign_in_never_redirects_off_site(sqlite_store: Any, db: str, target: str) -> None:
    client = make_app(sqlite_store, db, api_tokens=("tok",)).test_client()
    page = text(client.get("/signin"))
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore
    resp = client.post("/signin", data={"token": "tok", "csrf": csrf, "next": target})
    location = resp.headers["Location"]
    # A path on this server (werkzeug percent-encodes a backslash: /%5Cevil is a path).
    assert location.startswith("/") and not location.startswith(("//", "/\\")), location
    assert urlsplit(location).netloc == "" and urlsplit(location).scheme == "", location


def test_api_mutations_need_headers_a_cross_site_form_cannot_send(
    sqlite_store: Any, db: str
) -> None:
    """A cross-site <form> can POST urlencoded/multipart/text bodies with cookies, but no
    custom header: every mutating route needs Idempotency-Key (and with tokens, the
    console's X-Headgate-CSRF before a session cookie counts for anything)."""
    loopback = make_app(sqlite_store, db).test_client()
    for method, path, endpoint in api_rules(loopback.application):
        if method != "POST":
            continue  # a form can only GET or POST
        for ctype, body in (("application/x-www-form-urlencoded", "kind=k&payload="),
                            ("text/plain", '{"kind": "k", "payload": ""}'),
                            ("multipart/form-data; boundary=b", "--b--")):
            resp = loopback.post(path, data=body, headers={"Content-Type": ctype,
                                                           "Origin": "https://evil.example"})
            if endpoint in READ_POSTS:  # no key needed, but only a JSON body is read
                assert resp.status_code == 415, (path, ctype)
                continue
            assert resp.status_code == 400, (path, ctype)
            assert "Idempotency-Key" in resp.get_json()["error"]
    # With tokens: a signed-in session's cookie alone authorizes nothing.
    app = make_app(sqlite_store, db, api_tokens=("tok",))
    client = app.test_client()
    csrf = sign_in(client, "tok")
    headgate.Client(sqlite_store).enqueue("k", b"", queue="csrf-q")
    for headers in ({"Idempotency-Key": "a"}, {"Idempotency-Key": "b", "X-Headgate-CSRF": ""},
                    {"Idempotency-Key": "c", "X-Headgate-CSRF": csrf[:-1]}):
        resp = client.post("/api/v1/queues/csrf-q/pause", headers=headers)
        assert resp.status_code == 401, headers
    assert client.post("/api/v1/queues/csrf-q/pause", headers={
        "Idempotency-Key": "d", "X-Headgate-CSRF": csrf}).status_code == 204


def test_no_cors_is_ever_granted(sqlite_store: Any, db: str) -> None:
    app = make_app(sqlite_store, db)
    client = app.test_client()
    evil = {"Origin": "https://evil.example"}
    preflight = client.options("/api/v1/jobs", headers={
        **evil, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "idempotency-key, content-type"})
    assert not any(h.lower().startswith("access-control-") for h, _ in preflight.headers.items())
    try:
        for path in ("/api/v1/jobs", "/api/v1/events", "/", "/api/v1/openapi.json"):
            resp = client.get(path, headers=evil, buffered=path != "/api/v1/events")
            assert "Access-Control-Allow-Origin" not in resp.headers, path
            resp.close()
    finally:
        stop_app(app)  # the event stream started the broadcaster's thread


def test_the_session_cookie_never_holds_the_token(sqlite_store: Any, db: str) -> None:
    """Flask's session cookie is signed, not encrypted: whoever holds it (or a proxy
    that logs cookies) can read it. It names the token by its SHA-256 only."""
    token = "cookie-token-" + uuid.uuid4().hex
    app = make_app(sqlite_store, db, api_tokens=(token,))
    client = app.test_client()
    sign_in(client, token)
    cookie = client.get_cookie("headgate_session")
    assert cookie is not None
    data = app.session_interface.get_signing_serializer(app).loads(cookie.value)
    assert token not in json.dumps(data) and token not in cookie.value
    assert data[console_auth.SESSION_TOKEN] == console_auth.token_ref(token)
    # ...and the session still acts as that token, until the token is unconfigured.
    assert client.get("/").status_code == 200
    other = make_app(sqlite_store, db, api_tokens=("rotated",))
    other.secret_key = app.secret_key
    stale = other.test_client()
    stale.set_cookie("headgate_session", cookie.value)
    assert stale.get("/").status_code == 302


def test_the_session_cookie_is_httponly_and_samesite_strict(sqlite_store: Any, db: str) -> None:
    client = make_app(sqlite_store, db, api_tokens=("tok",)).test_client()
    resp = client.get("/signin")
    cookie = resp.headers["Set-Cookie"]
    assert cookie.startswith("headgate_session=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie


# -- 4. no XSS through any stored string ---------------------------------------------------

def hostile(n: int) -> str:
    """Markup that would run script `n` if it were ever rendered as HTML."""
    return f"<script>alert({n})</script>\"><img src=x onerror=alert({n})>'><svg onload=alert({n})>"


def short_hostile(n: int) -> str:  # tags are at most 64 characters
    return f"\"><img src=x onerror=alert({n})>"


@dataclass
class HostileWorld:
    job: str
    done: str
    odd_id_job: str
    schedule: str
    op_id: str
    queue: str
    fields: dict[str, int]


def store_hostile_strings(store: Any, quarantine: Callable[..., str]) -> HostileWorld:
    """One hostile string per stored field, each with its own number."""
    f = {name: i for i, name in enumerate([
        "kind", "queue", "partition", "rate_class", "tag", "header", "error", "log",
        "payload", "output", "result", "progress", "schedule_id", "schedule_kind",
        "worker_id", "worker_host", "worker_status", "limit_name", "job_id", "quarantine_kind",
        "op_selector", "signal_worker",
    ], start=1)}
    queue = hostile(f["queue"])
    c = headgate.Client(store)
    job = c.enqueue(hostile(f["kind"]), json.dumps({"note": hostile(f["payload"])}).encode(),
                    queue=queue, partition_key=hostile(f["partition"]),
                    rate_class=hostile(f["rate_class"]), tags=[short_hostile(f["tag"])],
                    headers={short_hostile(f["header"]): hostile(f["header"])},
                    max_attempts=1)
    claim = store.admit(hostile(f["worker_id"]), [queue], capacity=1)[0]
    store.report_progress(claim, 3, 10, hostile(f["progress"]))
    store.write_output(claim, hostile(f["output"]).encode())
    store.ack(claim, Outcome.RETRY, error=hostile(f["error"]), logs=[hostile(f["log"])])
    done = c.enqueue("sec.done", b"", queue=queue)
    claim = store.admit("w", [queue], capacity=1)[0]
    assert claim.job.id == done
    store.ack(claim, Outcome.SUCCESS, result=hostile(f["result"]).encode())
    odd = c.enqueue("sec.odd_id", b"", queue=queue, id=hostile(f["job_id"]))
    store.heartbeat(WorkerBeat(hostile(f["worker_id"]), host=hostile(f["worker_host"]), pid=1,
                               queues=(queue,), concurrency=2, inflight=1,
                               status=hostile(f["worker_status"])))
    store.heartbeat(WorkerBeat(hostile(f["signal_worker"]), host="h", pid=2, queues=(queue,),
                               concurrency=1))
    store.signal_worker(hostile(f["signal_worker"]), "quiet")
    store.upsert_concurrency_limit(hostile(f["limit_name"]), queue, 2)
    store.upsert_rate_class(hostile(f["rate_class"]), 1, 1000)
    schedule = hostile(f["schedule_id"])
    store.upsert_schedule({"id": schedule, "kind": hostile(f["schedule_kind"]),
                           "spec": "@every:60000", "queue": queue,
                           "payload": hostile(f["payload"]).encode()})
    run_schedule_now(store, schedule, "k", client=c)
    quarantine(store, hostile(f["quarantine_kind"]), b"boom")  # three real lost leases
    op = store.create_operation("cancel", {"queue": hostile(f["op_selector"])}, dry_run=True)
    return HostileWorld(job, done, odd, schedule, op.id, queue, f)


EXECUTABLE_URL = re.compile(r"^\s*(javascript|data|vbscript):", re.I)


def assert_inert(body: str, where: str) -> None:
    """Structurally: nothing stored became markup, an event handler, a script, an
    executable URL or an htmx instruction."""
    assert "<script>alert(" not in body and "<img src=x" not in body, where
    assert "<svg onload" not in body, where
    page = Page(body)
    assert page.scripts == [], (where, page.scripts)  # no inline script at all (CSP too)
    for el in page.elements:
        for name, value in el.attrs.items():
            assert not name.startswith("on"), (where, el.tag, name)
            assert not name.startswith("hx-on"), (where, el.tag, name)
            if name in ("href", "src", "action", "formaction", "xlink:href", "hx-get",
                        "hx-post", "hx-put", "hx-delete", "ws-connect", "data-then"):
                if el.tag == "link" and value.startswith("data:image/svg+xml,"):
                    continue  # the layout's constant favicon
                assert not EXECUTABLE_URL.match(value), (where, name, value)
                assert "<" not in value and '"' not in value, (where, name, value)
            if name in ("hx-vals", "hx-headers", "hx-vars"):
                assert not value.lstrip().startswith(("js:", "javascript:")), (where, value)
            if name == "data-body":
                json.loads(value)  # still one JSON value: nothing broke out of it
        if el.tag == "script":
            assert el.attrs.get("src", "").startswith("/static/"), (where, el.attrs)
        assert el.tag not in ("img", "iframe", "object", "embed", "base"), (where, el.tag)


def test_no_stored_string_becomes_markup_in_any_page_or_fragment(
    sqlite_store: Any, db: str, quarantine: Callable[..., str]
) -> None:
    w = store_hostile_strings(sqlite_store, quarantine)
    app = make_app(sqlite_store, db)
    client = app.test_client()
    seg = lambda v: quote(v, safe="")  # noqa: E731
    urls = [
        "/", f"/queues/{seg(w.queue)}", "/jobs", f"/jobs?queue={seg(w.queue)}",
        "/jobs?state=archived", f"/jobs?job={seg(w.job)}", f"/jobs?job={seg(w.odd_id_job)}",
        f"/jobs?job={seg(w.done)}",
        f"/jobs/{seg(w.job)}/payload", f"/jobs?q={seg('kind:' + hostile(1))}",
        f"/jobs?q={seg('<b>:x')}", "/rate-classes", f"/rate-classes?edit={seg(hostile(4))}",
        "/concurrency", f"/partitions?queue={seg(w.queue)}", "/quarantine", "/periodic",
        f"/periodic?edit={seg(w.schedule)}", f"/periodic/{seg(w.schedule)}", "/workers",
        "/cluster", f"/ops/{w.op_id}",
        # 404 pages echo what was asked for.
        f"/jobs/{seg(hostile(90))}", f"/queues/{seg(hostile(91))}",
        f"/periodic/{seg(hostile(92))}", f"/partitions?queue={seg(hostile(93))}",
        f"/ops/{seg(hostile(94))}", f"/jobs?job={seg(hostile(95))}",
    ]
    everything = []
    for url in urls:
        resp = client.get(url)
        assert resp.status_code in (200, 404), (url, resp.status_code)
        body = text(resp)
        assert_inert(body, url)
        everything.append(body)
    # The sign-in page echoes `next`.
    signin = make_app(sqlite_store, db, api_tokens=("t",)).test_client()
    body = text(signin.get("/signin?next=" + seg("/" + hostile(96))))
    assert_inert(body, "signin")
    everything.append(body)
    # Live fragments, for every topic, rendered as the socket sends them.
    with app.test_request_context("/live"):
        topics = {"totals", f"counts:{w.queue}", "queues", f"queue:{w.queue}", "workers",
                  "cluster", "rate_classes", "quarantine", "periodic",
                  f"partitions:{w.queue}", f"job:{w.job}", f"sheet:{w.job}",
                  f"job:{w.odd_id_job}", f"op:{w.op_id}"}
        data = live.load_topics(sqlite_store, topics)
        assert set(data) == topics
        for topic in sorted(topics):
            fragment = live.render_topic(topic, data[topic])
            assert_inert(fragment, topic)
            everything.append(fragment)
    # Every stored field was shown somewhere — escaped.
    joined = "\n".join(everything)
    for name, n in w.fields.items():
        shown = (html.escape(hostile(n), quote=False) in joined or
                 html.escape(short_hostile(n), quote=False) in joined or
                 f"alert({n})" in html.unescape(joined))
        assert shown, name


# -- 5. payloads hidden unless asked for ---------------------------------------------------

def test_payloads_are_hidden_on_every_read_path_unless_asked_for(api: Api) -> None:
    secret = "PAYLOAD-" + uuid.uuid4().hex
    payload = json.dumps({"card": secret}).encode()
    encoded = base64.b64encode(payload).decode()
    marks = (secret, encoded, encoded[:20])
    body = {"kind": "pay.charge", "payload": encoded, "queue": "pay"}
    first = api.post("/jobs", json=body, key="pay-1")
    job_id = first.json()["id"]
    replay = api.post("/jobs", json=body, key="pay-1")
    claim = api.store.admit("w", ["pay"], capacity=1)[0]
    api.store.ack(claim, Outcome.RETRY, error="declined")
    api.put("/periodic/pay-sched", json={"kind": "pay.tick", "spec": "@every:60000",
                                         "payload": encoded})
    reads = [
        first, replay, api.get(f"/jobs/{job_id}"), api.get("/jobs"),
        api.get("/jobs", params={"include_payload": "false"}),
        api.get("/jobs", params={"q": f"id:{job_id}"}),
        api.get(f"/jobs/{job_id}/admission"), api.get("/periodic"),
        api.post("/jobs/actions", json={"action": "retry", "ids": [job_id]}),
        api.post("/jobs/bulk", json={"action": "cancel", "selector": {"queue": "pay"},
                                     "dry_run": True}),
        api.get("/queues"), api.get("/system/info"), api.get("/metrics"),
        api.get("/periodic/pay-sched/enqueue-events"),
    ]
    op = reads[-5].json()
    reads.append(api.get(f"/operations/{op['id']}"))
    for resp in reads:
        assert resp.status_code < 400, (resp.url, resp.text)
        for mark in marks:
            assert mark not in resp.text, (resp.request.method, resp.url)
    # The event stream carries queue names only.
    with requests.get(api.url + "/events", stream=True, timeout=10) as stream:
        api.post("/jobs", json=body, key="pay-2")
        chunk = b""
        deadline = time.monotonic() + 5
        while b"queue_activity" not in chunk and time.monotonic() < deadline:
            chunk += stream.raw.read1(4096) if hasattr(stream.raw, "read1") else \
                stream.raw.read(64)
        assert b"queue_activity" in chunk and secret.encode() not in chunk
    # Only an explicit request shows it, and only `true` means true.
    assert api.get(f"/jobs/{job_id}", params={"include_payload": "true"}).json()[
        "payload"] == encoded
    assert api.get("/jobs", params={"include_payload": "true", "queue": "pay"}).json()[
        "jobs"][-1]["payload"] == encoded
    assert api.get("/periodic", params={"include_payload": "true"}).json()[0][
        "payload"] == encoded
    for value in ("1", "yes", "True", ""):
        r = api.get(f"/jobs/{job_id}", params={"include_payload": value})
        assert (r.status_code, r.json()) == (
            400, {"error": "invalid query parameter `include_payload`"}), value


def test_the_console_shows_a_payload_only_on_request(sqlite_store: Any, db: str) -> None:
    secret = "PAYLOAD-" + uuid.uuid4().hex
    payload = json.dumps({"card": secret}).encode()
    encoded = base64.b64encode(payload).decode()
    job_id = headgate.Client(sqlite_store).enqueue("pay.charge", payload, queue="pay")
    app = make_app(sqlite_store, db)
    client = app.test_client()
    for url in ("/", "/jobs", "/jobs?queue=pay", f"/jobs?job={job_id}", f"/jobs/{job_id}",
                "/queues/pay", "/partitions?queue=pay"):
        body = text(client.get(url, follow_redirects=True))
        assert secret not in body and encoded not in body, url
    with app.test_request_context("/live"):
        for topic in (f"sheet:{job_id}", f"job:{job_id}"):
            fragment = live.render_topic(topic, live.load_topics(sqlite_store, {topic})[topic])
            assert secret not in fragment and encoded not in fragment, topic
    sheet = text(client.get(f"/jobs?job={job_id}"))
    assert "Show payload" in sheet and f"/jobs/{job_id}/payload" in sheet
    assert secret in text(client.get(f"/jobs/{job_id}/payload"))


# -- 6. SQL only with bound parameters -----------------------------------------------------

NASTY = ["a'b", 'a"b', "a%b", "a_b", "a\\b", "%", "_", "\\", "'", "a%", "%a", "' OR '1'='1",
         "x';--", "a\\%b", "é%_", "ab", "aXb", "a", "a%%", "*", "a[b]", "$1", "?"]


def test_hostile_filters_match_exactly_and_never_error(api: Api) -> None:
    """Quotes, LIKE wildcards, backslashes and placeholders in every filter: each one
    matches exactly the jobs that hold that value — on both backends."""
    jobs: dict[str, dict[str, Any]] = {}
    for i, v in enumerate(NASTY):
        job_id = f"id{i}-{v}"
        r = api.post("/jobs", json={"kind": v, "payload": "", "queue": v, "partition_key": v,
                                    "tags": [v], "rate_class": v, "id": job_id})
        assert r.status_code == 201, (v, r.text)
        jobs[job_id] = api.get(f"/jobs/{quote(job_id, safe='')}").json()

    def ids(params: dict[str, str]) -> set[str]:
        r = api.get("/jobs", params={**params, "limit": "200"})
        assert r.status_code == 200, (params, r.text)
        return {j["id"] for j in r.json()["jobs"]}

    for v in NASTY:
        exact = {j for j, job in jobs.items() if job["kind"] == v}
        assert len(exact) == 1
        prefixed = {j for j, job in jobs.items() if job["kind"].startswith(v)}
        fp = jobs[next(iter(exact))]["fingerprint"]
        same_fp = {j for j, job in jobs.items() if job["fingerprint"] == fp}
        filters: list[dict[str, str]] = [{"queue": v}, {"kind": v}, {"partition_key": v},
                                         {"tags_all": v}, {"tags_any": v}]
        if not any(c.isspace() for c in v):  # q terms are split on whitespace
            filters += [{"q": f"{name}:{v}"} for name in
                        ("queue", "kind", "partition", "tag", "tag_any", "rate_class")]
            filters.append({"q": f"id:{next(iter(exact))}"})
            assert ids({"q": v}) == prefixed, v  # a bare term: a kind prefix, no pattern
        for params in filters:
            assert ids(params) == exact, (v, params)
        assert ids({"q": f"fingerprint:{fp}"}) == same_fp, v
        counts = api.get("/jobs/counts", params={"queue": v}).json()["counts"]
        assert counts["available"] == 1, v
        parts = api.get("/partitions", params={"queue": v}).json()
        assert [p["partition_key"] for p in parts] == [v]
        for selector in ({"queue": v}, {"kind": v}, {"partition_key": v}):
            op = api.post("/jobs/bulk", json={"action": "cancel", "selector": selector,
                                              "dry_run": True}).json()
            assert op["total_estimated"] == 1, (v, selector)
    # Keyset pagination over hostile ids: every job exactly once, newest (largest) first.
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "3"} if cursor is None else {"limit": "3", "cursor": cursor}
        page = api.get("/jobs", params=params).json()
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(jobs, reverse=True)
    # Nothing was dropped or rewritten by any of it.
    assert api.get("/jobs/counts").json()["counts"]["available"] == len(NASTY)


# Every place under headgate/adapters that builds SQL text from something other than a
# literal, and why that is safe. A new interpolation fails the test until reviewed here.
# What Python code under adapters/ still splices into SQL text (the statements' own
# {fields} are reviewed where they live: tests/package/test_sql_home.py's FIELDS).
SQL_INTERPOLATIONS: dict[str, str] = {
    "column": "a column name from a literal tuple/dict key in the same function, or a "
              "literal passed by SqlStore (set_queue: paused | weight | max_unfinished_jobs)",
    "marks": "',' / ', ' joins of '?' repeated len(values) times",
    "', '.join('?' * len(states))": "placeholders only",
    "','.join('?' * len(names))": "placeholders only (lifecycle.promote_due's queue list)",
    "' AND '.join(where)": "clauses built from literal columns and '?' placeholders only "
                           "(job_pages._where, audit.page)",
}
# str.format on SQL templates: only these fields, each a dialect constant or placeholders
# (`in_queues`: "" or " AND queue IN (?, …)"; `waiting`: the dialect's waiting_partition;
# `written`: "?, …"; `name_order`: the dialect's binary_order of a literal column).
SQL_FORMAT_FIELDS = {"marks", "rows", "for_update", "skip_locked", "in_queues", "waiting",
                     "written", "name_order"}
SQL_TEXT = re.compile(r"\b(SELECT|INSERT INTO|DELETE FROM|WHERE|PRAGMA|LISTEN|VALUES)\b"
                      r"|\bUPDATE \w+ SET\b|\bIN \(|\bAND \b|[=<>] \?|\(\?|, \?")


def _sql_interpolations(path: Path) -> list[tuple[str, int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr):
            literal = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            if SQL_TEXT.search(literal):
                out += [("f", node.lineno, ast.unparse(v.value)) for v in node.values
                        if isinstance(v, ast.FormattedValue)]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if (isinstance(side, ast.Constant) and isinstance(side.value, str)
                        and SQL_TEXT.search(side.value) and not isinstance(other, ast.Constant)):
                    out.append(("+", node.lineno, ast.unparse(other)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "format"):
            template = node.func.value
            is_sql = (isinstance(template, ast.Name) and template.id.isupper()) or (
                isinstance(template, ast.Constant) and isinstance(template.value, str)
                and SQL_TEXT.search(template.value))
            if not is_sql:
                continue
            for kw in node.keywords:
                out.append(("format", node.lineno, f"{kw.arg}="))
            for arg in node.args:
                out.append(("format-arg", node.lineno, ast.unparse(arg)))
    return out


def test_sql_text_interpolates_only_reviewed_constants() -> None:
    files = sorted((ROOT / "headgate" / "adapters").rglob("*.py"))
    assert len(files) > 10
    unreviewed = []
    for path in files:
        for how, line, expr in _sql_interpolations(path):
            rel = f"{path.relative_to(ROOT)}:{line}"
            if how == "format":
                if expr.rstrip("=") not in SQL_FORMAT_FIELDS:
                    unreviewed.append(f"{rel} .format({expr}…)")
            elif how == "format-arg":
                # The one positional use: quoted State enum values.
                if "for s in UNFINISHED" not in expr:
                    unreviewed.append(f"{rel} .format({expr})")
            elif expr not in SQL_INTERPOLATIONS:
                unreviewed.append(f"{rel} {how} {expr}")
    used = {expr for path in files for _, _, expr in _sql_interpolations(path)}
    stale = sorted(set(SQL_INTERPOLATIONS) - used)
    assert not stale, ("reviewed interpolations that nothing uses any more", stale)
    assert not unreviewed, ("SQL built from something unreviewed; bind it as a parameter "
                            "or review it into SQL_INTERPOLATIONS with why it is safe",
                            unreviewed)


def test_dynamic_column_names_come_from_literals() -> None:
    """`set_queue(..., column, value)` is the one helper taking a column name as an
    argument: every caller passes a literal from a fixed set."""
    calls = []
    for path in (ROOT / "headgate").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "set_queue"):
                calls.append(node.args[3])
    assert calls
    for arg in calls:
        assert isinstance(arg, ast.Constant), ast.unparse(arg)
        assert arg.value in {"paused", "weight", "max_unfinished_jobs"}


# -- 7. request size limits and hostile URLs -----------------------------------------------

def test_oversized_bodies_are_413_json_on_every_body_route(sqlite_store: Any, db: str) -> None:
    app = make_app(sqlite_store, db)
    client = app.test_client()
    big = b'{"payload": "' + b"A" * (app.config["MAX_CONTENT_LENGTH"] + 1) + b'"}'
    for method, path, _ in api_rules(app):
        if method not in MUTATING:
            continue
        resp = client.open(path, method=method, data=big, headers={
            "Idempotency-Key": "k", "Content-Type": "application/json"})
        assert resp.status_code == 413, (method, path, resp.status_code)
        assert resp.get_json() == {"error": "request body too large"}
    # The console's own forms too (no 500, no parsing of the whole thing).
    resp = client.post("/signin", data=b"token=" + b"x" * (app.config["MAX_CONTENT_LENGTH"] + 1),
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert resp.status_code in (302, 413)


def test_chunked_bodies_are_capped_too(api: Api) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"kind": "k", "payload": "'
        for _ in range(40):
            yield b"A" * 65536 * 2
        yield b'"}'

    r = api.session.post(api.url + "/jobs", data=chunks(), timeout=30, headers={
        "Idempotency-Key": "chunked", "Content-Type": "application/json"})
    assert r.status_code in (400, 413), r.text
    assert r.headers["Content-Type"] == "application/json"


@pytest.fixture(scope="module")
def console_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    db = str(tmp_path_factory.mktemp("console") / "c.db")
    store = headgate.open_store(f"sqlite:///{db}")
    build_world(store)
    yield make_app(store, db)
    store.close()


@settings(max_examples=120, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(
    route=st.sampled_from(["/", "/jobs", "/queues/{}", "/jobs/{}", "/jobs/{}/payload",
                           "/periodic/{}", "/ops/{}", "/partitions", "/rate-classes",
                           "/periodic", "/signin"]),
    segment=st.text(min_size=1, max_size=40).filter(lambda s: s not in (".", "..")),
    params=st.dictionaries(
        st.sampled_from(["q", "state", "queue", "cursor", "job", "edit", "range", "next"]),
        st.one_of(st.text(max_size=60), st.sampled_from([
            "priority:99999999999999999999", "tag:" + "x" * 70, "state:nope",
            "AAAA", "id:" + "a" * 300, "kind:%", "priority:-1"]))),
)
def test_the_console_never_500s_on_any_url(console_app: Any, route: str, segment: str,
                                           params: dict[str, str]) -> None:
    app = console_app
    path = route.format(quote(segment, safe=""))
    resp = app.test_client().get(path, query_string=params)
    assert resp.status_code < 500, (path, params, text(resp)[:300])
    if resp.status_code == 200:
        assert_inert(text(resp), path)




def test_nul_in_a_url_is_a_400_everywhere(api: Api) -> None:
    for path in ("/api/v1/jobs/a%00b", "/api/v1/jobs?q=a%00", "/api/v1/jobs?queue=%00",
                 "/api/v1/jobs/counts?queue=%00", "/api/v1/queues/a%00/history",
                 "/api/v1/operations/%00", "/api/v1/jobs?a%00=1"):
        r = api.get(path)
        assert r.status_code == 400 and "error" in r.json(), (path, r.text)
    r = api.get("/api/v1/jobs?cursor=AAAA")  # decodes to NULs
    assert (r.status_code, r.json()) == (400, {"error": "invalid query parameter `cursor`"})
    r = api.post("/jobs/actions", json={"action": "retry", "ids": ["a\x00b"]})
    assert r.status_code == 200 and r.json()["failed"][0]["id"] == "a\x00b"
    for path in ("/jobs/a%00b", "/jobs?q=%00", "/queues/%00"):
        assert api.get(api.base + path).status_code == 400


def test_durations_too_large_to_add_to_store_time_are_refused(api: Api) -> None:
    """retention_ms = i64::MAX was accepted, then every ack of the job overflowed."""
    top = 2**63 - 1
    for name in ("retention_ms", "unique_window_ms", "unique_debounce_ms"):
        body = {"kind": "k", "payload": "", name: top, "unique_key": "YQ=="}
        r = api.post("/jobs", json=body)
        assert (r.status_code, r.json()) == (400, {"error": f"{name} must be <= {2**62}"})
    r = api.put("/periodic/p", json={"kind": "k", "spec": "@every:60000", "retention_ms": top})
    assert r.status_code == 400
    # The largest accepted one still runs to completion and can be cancelled.
    job_id = api.enqueue(queue="long", retention_ms=2**62)
    claim = api.store.admit("w", ["long"], capacity=1)[0]
    api.store.ack(claim, Outcome.SUCCESS)
    assert api.get(f"/jobs/{job_id}").json()["state"] == "completed"
    other = api.enqueue(queue="long", retention_ms=2**62)
    assert api.post(f"/jobs/{other}/cancel").status_code == 204


def test_too_many_tag_filters_are_a_400_not_a_store_outage(api: Api) -> None:
    api.enqueue(tags=["t0", "t1"])
    r = api.get("/jobs", params={"q": " ".join(f"tag:t{i % 2}" for i in range(100))})
    assert r.status_code == 200 and len(r.json()["jobs"]) == 1
    for params in ({"q": " ".join(f"tag:t{i}" for i in range(1500))},
                   {"tags_all": ",".join(f"t{i}" for i in range(101))},
                   {"tags_any": ",".join(f"t{i}" for i in range(5000))}):
        r = api.get("/jobs", params=params)
        assert (r.status_code, r.json()) == (400, {"error": "at most 100 tags in a filter"})


# -- 8. Idempotency-Key replays never cross callers ----------------------------------------

def test_an_idempotency_key_never_replays_another_callers_response(make_api: Any) -> None:
    api = make_api(settings=Settings(api_tokens=("alice-tok", "bob-tok"),
                                     api_read_tokens=("carol-ro",)))
    alice = {"Authorization": "Bearer alice-tok"}
    bob = {"Authorization": "Bearer bob-tok"}
    api.put("/periodic/shared", json={"kind": "tick", "spec": "@every:60000"}, headers=alice)
    cases = [
        ("POST", "/jobs", {"kind": "k", "payload": ""}),
        ("POST", "/jobs/bulk", {"action": "cancel", "selector": {"queue": "default"},
                                "dry_run": True}),
        ("POST", "/periodic/shared/run", None),
        ("PUT", "/queues/shared", {"weight": 3}),
        ("POST", "/queues/actions/sample-memory", {}),
    ]
    for method, path, body in cases:
        key = f"same-{method}-{path}"
        a = api.request(method, path, json=body, key=key, headers=alice)
        b = api.request(method, path, json=body, key=key, headers=bob)
        assert a.status_code < 300 and b.status_code < 300, (path, a.text, b.text)
        assert "Idempotent-Replayed" not in b.headers, path  # bob ran his own request
        if a.content and a.headers.get("Content-Type") == "application/json":
            assert a.json().get("id") is None or a.json()["id"] != b.json()["id"], path
        again = api.request(method, path, json=body, key=key, headers=alice)
        assert again.headers.get("Idempotent-Replayed") == "true", path
        if a.content:
            replayed = again.json()
            replayed.pop("replayed", None)
            assert replayed == a.json(), path  # alice gets exactly her own answer
        # Without credentials, or with a read-only token, the key replays nothing.
        assert api.request(method, path, json=body, key=key).status_code == 401
        ro = api.request(method, path, json=body, key=key,
                         headers={"Authorization": "Bearer carol-ro"})
        assert (ro.status_code, ro.json()) == (403, {"error": "read-only token"})
    # Enqueue dedup by key is per caller too: two jobs, one per caller.
    assert api.get("/jobs/counts", headers=alice).json()["counts"]["available"] == 4


# -- 9. security headers -------------------------------------------------------------------

def test_console_pages_carry_security_headers(sqlite_store: Any, db: str) -> None:
    world = build_world(sqlite_store)
    app = make_app(sqlite_store, db, api_tokens=("tok",))
    anon = app.test_client()
    client = app.test_client()
    sign_in(client, "tok")
    job = world.seeded.archived[0]
    responses = [(u, client.get(u)) for u in console_urls(world)]
    responses += [(f"/jobs/{job}/payload", client.get(f"/jobs/{job}/payload")),
                  ("/jobs/nope", client.get("/jobs/nope")), ("/signin", anon.get("/signin")),
                  ("/ (redirect)", anon.get("/"))]
    for url, resp in responses:
        csp = resp.headers.get("Content-Security-Policy", "")
        directives = dict(d.strip().split(" ", 1) for d in csp.split(";") if d.strip())
        assert directives.get("default-src") == "'self'", url
        assert directives.get("script-src") == "'self'", url
        assert directives.get("frame-ancestors") == "'none'", url
        assert directives.get("base-uri") == "'none'", url
        assert directives.get("form-action") == "'self'", url
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, url
        assert resp.headers.get("X-Content-Type-Options") == "nosniff", url
        assert resp.headers.get("X-Frame-Options") == "DENY", url
        assert resp.headers.get("Referrer-Policy") == "same-origin", url
        if resp.mimetype == "text/html":
            assert resp.headers.get("Cache-Control") == "no-store", url
    # htmx is told not to evaluate anything it is sent.
    config = json.loads(Page(text(client.get("/"))).meta("htmx-config"))
    assert config["allowEval"] is False and config["allowScriptTags"] is False
    assert config["selfRequestsOnly"] is True


# -- 10. enqueue middleware failures -------------------------------------------------------

SECRET_DETAIL = "secret internals <b>db password=hunter2</b>"


def _raise(*_: Any, **__: Any) -> Any:
    raise RuntimeError(SECRET_DETAIL)


class BrokenHook:
    def before_insert(self, context: Any, envs: Any) -> None:
        _raise()

    def after_insert(self, context: Any, envs: Any, ids: Any, error: Any) -> None:
        pass


@pytest.mark.parametrize("hook", ["middleware", "insert_hook", "authorizer", "plugin"])
def test_an_enqueue_middleware_failure_is_a_json_500_naming_it(
    make_api: Any, hook: str, caplog: pytest.LogCaptureFixture
) -> None:
    kwargs: dict[str, Any] = {
        "middleware": {"middleware": [_raise]},
        "insert_hook": {"insert_hooks": [BrokenHook()]},
        "authorizer": {"enqueue_authorizer": _raise},
        "plugin": {"plugins": [headgate.services.client.Plugin("broken", middleware=[_raise])]},
    }[hook]
    caplog.set_level(logging.ERROR, logger="headgate.api")
    api = make_api(**kwargs)
    for method, path, body in (
        ("POST", "/jobs", {"kind": "k", "payload": ""}),
        ("PUT", "/periodic/s", {"kind": "k", "spec": "@every:60000"}),
    ):
        if path.startswith("/periodic") and hook not in ("authorizer",):
            continue  # only the authorizer runs at schedule upsert
        r = api.request(method, path, json=body, key="k1")
        assert r.status_code == 500
        assert r.headers["Content-Type"] == "application/json"
        assert r.json() == {"error": "enqueue middleware failed"}
        assert "hunter2" not in r.text and "Traceback" not in r.text
    if hook != "authorizer":
        api.store.upsert_schedule({"id": "s2", "kind": "k", "spec": "@every:60000"})
        r = api.post("/periodic/s2/run")
        assert (r.status_code, r.json()) == (500, {"error": "enqueue middleware failed"})
    # Logged server-side, with the cause.
    assert any("enqueue middleware failed" in rec.getMessage() and rec.exc_text
               and "hunter2" in rec.exc_text for rec in caplog.records)
    # The key was released: the same request runs again (and fails the same way).
    r = api.post("/jobs", json={"kind": "k", "payload": ""}, key="k1")
    assert r.status_code == 500 and "Idempotent-Replayed" not in r.headers
    assert api.get("/jobs/counts").json()["counts"]["available"] == 0


def test_a_middleware_that_refuses_on_purpose_keeps_its_status(make_api: Any) -> None:
    def refuse(context: Any, batch: Any, call_next: Callable[..., Any]) -> Any:
        raise headgate.InvalidInput("tenant header required")

    api = make_api(middleware=[refuse])
    r = api.post("/jobs", json={"kind": "k", "payload": ""})
    assert (r.status_code, r.json()) == (400, {"error": "tenant header required"})


# -- token guessing -------------------------------------------------------------------------

def test_token_guessing_is_slowed_per_address_on_the_api_and_the_sign_in_form(
    make_api: Any,
) -> None:
    api = make_api(settings=Settings(api_tokens=("right-token",), auth_failures_per_minute=3))
    good = {"Authorization": "Bearer right-token"}
    assert api.get("/jobs").status_code == 401  # no token guesses nothing: not counted
    for i in range(2):
        r = api.get("/jobs", headers={"Authorization": f"Bearer guess-{i}"})
        assert r.status_code == 401
    console = requests.Session()
    page = console.get(api.base + "/signin", timeout=10).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    r = console.post(api.base + "/signin", data={"token": "guess-2", "csrf": csrf},
                     allow_redirects=False, timeout=10)
    assert r.status_code == 401  # the third failure, counted with the API's
    # Past the limit even the right token waits, or guessing would go on.
    r = api.get("/jobs", headers=good)
    assert r.status_code == 429
    assert r.json()["error"].startswith("too many failed token attempts")
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    r = console.post(api.base + "/signin", data={"token": "right-token", "csrf": csrf},
                     allow_redirects=False, timeout=10)
    assert r.status_code == 429 and "Too many failed attempts" in r.text
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    assert console.get(api.base + "/", allow_redirects=False, timeout=10).status_code == 302
    # Another address is not slowed (all of 127.0.0.0/8 is this machine's loopback).
    host, port = urlsplit(api.base).hostname, urlsplit(api.base).port
    conn = http.client.HTTPConnection(host, port, timeout=10, source_address=("127.0.0.2", 0))
    try:
        conn.request("GET", "/api/v1/jobs", headers=good)
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def test_failed_attempts_age_out_and_the_addresses_kept_are_bounded() -> None:
    attempts = FailedAttempts(2, window_s=0.3, max_addresses=3)
    attempts.failed("10.0.0.1")
    assert attempts.retry_after("10.0.0.1") == 0  # one failure: under the limit
    attempts.failed("10.0.0.1")
    assert attempts.retry_after("10.0.0.1") >= 1
    time.sleep(0.35)
    assert attempts.retry_after("10.0.0.1") == 0
    for i in range(2, 10):
        attempts.failed(f"10.0.0.{i}")
        attempts.failed(f"10.0.0.{i}")
    assert attempts.retry_after("10.0.0.9") >= 1
    assert attempts.retry_after("10.0.0.2") == 0  # forgotten: only the newest 3 are kept


def test_the_session_cookie_is_https_only_when_configured(make_api: Any) -> None:
    for secure in (False, True):
        api = make_api(settings=Settings(api_tokens=("tok",), cookie_secure=secure))
        r = requests.get(api.base + "/signin", timeout=10)
        cookie = r.headers["Set-Cookie"]
        assert cookie.startswith("headgate_session=") and "HttpOnly" in cookie
        assert ("; Secure" in cookie) is secure, cookie
