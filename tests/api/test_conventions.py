"""The API's conventions (docs/api.md) over real HTTP: Idempotency-Key (required, replayed, scoped,
durable), read-only mode on every mutating route, bearer tokens, JSON 404/405,
liveness/readiness that never count."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import requests

import headgate
from headgate import StoreUnavailable
from headgate.api.blueprint import READ_POSTS
from headgate.services.config import Settings

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

MUTATING = ("POST", "PUT", "DELETE")
KEY_REQUIRED = {"error": "Idempotency-Key header is required on every mutating request"}


def api_rules(app: Any) -> list[tuple[str, str]]:
    """(method, path with placeholders filled) for every /api/v1 rule of the app; the
    POSTs that are reads (test_forecast_api.py) are not mutating routes."""
    out = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1") or rule.endpoint in READ_POSTS:
            continue
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", "x", rule.rule)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            out.append((method, path))
    return out


# -- Idempotency-Key ----------------------------------------------------------------

def test_every_mutating_route_requires_idempotency_key(api: Api) -> None:
    mutating = [(m, p) for m, p in api_rules(api.app) if m in MUTATING]
    # every POST/PUT/DELETE route of docs/api.md's table (9 of the worker protocol)
    assert len(mutating) == 35
    for method, path in mutating:
        r = requests.request(method, api.base + path, json={}, timeout=10)
        assert (r.status_code, r.json()) == (400, KEY_REQUIRED), (method, path)
    r = api.post("/jobs", key="", json={"kind": "k", "payload": ""})
    assert (r.status_code, r.json()) == (400, KEY_REQUIRED)
    r = api.post("/jobs", key="k" * 256, json={"kind": "k", "payload": ""})
    assert (r.status_code, r.json()) == (400, {"error": "Idempotency-Key must be at most 255 "
                                                         "characters"})
    assert api.get("/jobs/counts").json()["counts"]["available"] == 0


def test_enqueue_replay_same_response_no_second_job(api: Api) -> None:
    body = {"kind": "email.send", "payload": ""}
    first = api.post("/jobs", json=body, key="order-42")
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    again = api.post("/jobs", json=body, key="order-42")
    assert again.status_code == 201
    assert again.json() == {"id": first.json()["id"], "replayed": True}
    assert again.headers["Idempotent-Replayed"] == "true"
    assert api.get("/jobs/counts").json()["counts"]["available"] == 1


def _forget_every_key(api: Api, store_url: str) -> None:
    """What an expired record amounts to: the key's row gone, its job still there."""
    if api.store.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(api.store.path) as conn:  # type: ignore[attr-defined]
            conn.execute("DELETE FROM api_idempotency")
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute("DELETE FROM api_idempotency")


def test_a_retry_whose_record_is_gone_joins_its_job_and_stores_the_answer(
        api: Api, store_url: str) -> None:
    """The Idempotency-Key is also the job's unique key: a retry after its record went
    (the job outlived it) is answered with the first job, and that answer is stored."""
    body = {"kind": "email.send", "payload": ""}
    first = api.post("/jobs", json=body, key="order-43").json()["id"]
    _forget_every_key(api, store_url)
    joined = api.post("/jobs", json=body, key="order-43")
    assert (joined.status_code, joined.json()) == (201, {"id": first, "replayed": True})
    assert "Idempotent-Replayed" not in joined.headers  # decided by the unique key
    replayed = api.post("/jobs", json=body, key="order-43")
    assert replayed.json() == {"id": first, "replayed": True}
    assert replayed.headers["Idempotent-Replayed"] == "true"  # now from the stored answer
    assert api.get("/jobs/counts").json()["counts"]["available"] == 1


def test_replay_is_verbatim_even_after_state_changed(api: Api) -> None:
    job_id = api.enqueue()
    first = api.delete(f"/jobs/{job_id}", key="del-1")
    assert first.status_code == 204
    again = api.delete(f"/jobs/{job_id}", key="del-1")  # the job is gone; the answer is not
    assert (again.status_code, again.content) == (204, b"")
    assert again.headers["Idempotent-Replayed"] == "true"
    fresh = api.delete(f"/jobs/{job_id}", key="del-2")
    assert fresh.status_code == 404


def test_replay_keeps_meaningful_headers(api: Api, quarantine) -> None:
    fp = quarantine(api.store, "crashy", b"boom")
    first = api.delete(f"/quarantine/{fp}", key="rel")
    again = api.delete(f"/quarantine/{fp}", key="rel")
    assert first.headers["x-released-jobs"] == again.headers["x-released-jobs"] == "1"
    assert again.status_code == 204


def test_same_key_different_request_is_422_and_other_paths_are_independent(api: Api) -> None:
    assert api.post("/jobs", json={"kind": "a", "payload": ""}, key="k1").status_code == 201
    r = api.post("/jobs", json={"kind": "b", "payload": ""}, key="k1")
    assert (r.status_code, r.json()) == (
        422, {"error": "Idempotency-Key was already used with a different request"})
    assert api.put("/queues/q", json={"weight": 2}, key="k1").status_code == 200


def test_failed_requests_are_not_stored(api: Api) -> None:
    api.put("/queues/tight/enqueue-limit", json={"max_unfinished_jobs": 0})
    body = {"kind": "k", "payload": "", "queue": "tight"}
    assert api.post("/jobs", json=body, key="retry-me").status_code == 429
    api.delete("/queues/tight/enqueue-limit")
    r = api.post("/jobs", json=body, key="retry-me")  # ran again, now succeeds
    assert r.status_code == 201 and "replayed" not in r.json()


def test_concurrent_duplicate_is_409_in_progress(make_api) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(context, batch, call_next):
        entered.set()
        release.wait(10)
        return call_next(batch)

    api = make_api(middleware=[slow])
    body = {"kind": "k", "payload": ""}
    result: dict[str, requests.Response] = {}
    t = threading.Thread(target=lambda: result.update(first=api.post("/jobs", json=body,
                                                                    key="dup")))
    t.start()
    assert entered.wait(10)
    r = api.post("/jobs", json=body, key="dup")
    assert (r.status_code, r.json()) == (
        409, {"error": "a request with this Idempotency-Key is still in progress"})
    assert r.headers["Retry-After"] == "1"
    release.set()
    t.join(10)
    assert result["first"].status_code == 201


def test_keys_survive_a_restart_and_outlive_the_job(servers) -> None:
    first_server = servers.start()
    body = {"kind": "k", "payload": "", "retention_ms": 0}
    first = first_server.post("/jobs", json=body, key="durable")
    job_id = first.json()["id"]
    # The job completes and is deleted (retention 0): its unique key is released…
    claim = first_server.store.admit("w", ["default"], 1)[0]
    first_server.store.ack(claim, headgate.Outcome.SUCCESS)
    assert first_server.get(f"/jobs/{job_id}").status_code == 404
    # …a new server process on the same database still replays the first answer.
    second_server = servers.start()
    again = second_server.post("/jobs", json=body, key="durable")
    assert again.json() == {"id": job_id, "replayed": True}
    assert second_server.get("/jobs/counts").json()["counts"]["available"] == 0


def test_keys_are_scoped_per_token(make_api) -> None:
    api = make_api(settings=Settings(api_tokens=("alice-token", "bob-token")))
    alice = {"Authorization": "Bearer alice-token"}
    bob = {"Authorization": "Bearer bob-token"}
    body = {"kind": "k", "payload": ""}
    a = api.post("/jobs", json=body, key="same", headers=alice)
    b = api.post("/jobs", json=body, key="same", headers=bob)
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] != b.json()["id"]  # bob never sees alice's response or job
    assert "replayed" not in b.json()
    assert api.post("/jobs", json=body, key="same", headers=alice).json() == {
        "id": a.json()["id"], "replayed": True}


# -- read-only mode -----------------------------------------------------------------

def test_read_only_mode_refuses_every_mutating_route(make_api) -> None:
    api = make_api(settings=Settings(read_only=True))
    mutating = [(m, p) for m, p in api_rules(api.app) if m in MUTATING]
    for method, path in mutating:
        for key in ({"Idempotency-Key": "k"}, {}):
            r = requests.request(method, api.base + path, json={}, headers=key, timeout=10)
            assert (r.status_code, r.json()) == (403, {"error": "read-only mode"}), (method, path)
    assert api.get("/jobs").status_code == 200
    assert api.get("/meta").json()["read_only"] is True
    assert api.get("/jobs/counts").json()["counts"]["available"] == 0


def test_read_only_from_env() -> None:
    assert Settings.from_env({"HG_READ_ONLY": "1"}).read_only is True


# -- tokens -------------------------------------------------------------------------

def test_tokens_required_when_configured(make_api, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    api = make_api(settings=Settings(api_tokens=("s3cret-token",),
                                     api_read_tokens=("reader-token",)))
    r = api.get("/jobs")
    assert (r.status_code, r.json()) == (401, {"error": "missing bearer token"})
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    r = api.get("/jobs", headers={"Authorization": "Bearer wrong"})
    assert (r.status_code, r.json()) == (401, {"error": "invalid bearer token"})
    r = api.get("/jobs", headers={"Authorization": "Basic czNjcmV0"})
    assert r.status_code == 401
    good = {"Authorization": "Bearer s3cret-token"}
    assert api.get("/jobs", headers=good).status_code == 200
    assert api.post("/jobs", json={"kind": "k", "payload": ""}, headers=good).status_code == 201
    # Never in a query string, not even alongside a valid header.
    for name in ("access_token", "token"):
        r = api.get(f"/jobs?{name}=s3cret-token")  # (only the client logs this URL)
        assert r.status_code == 401
        assert "not accepted in query strings" in r.json()["error"]
        assert api.get(f"/jobs?{name}=s3cret-token", headers=good).status_code == 401
    # The read-only kind reads and nothing else.
    reader = {"Authorization": "Bearer reader-token"}
    assert api.get("/queues", headers=reader).status_code == 200
    r = api.post("/jobs", json={"kind": "k", "payload": ""}, headers=reader)
    assert (r.status_code, r.json()) == (403, {"error": "read-only token"})
    assert api.get("/meta", headers=reader).json()["read_only"] is True
    assert api.get("/meta", headers=good).json()["read_only"] is False
    # Liveness needs none; metrics do.
    assert api.get("/healthz").status_code == 200
    assert api.get("/api/v1/healthz").status_code == 200
    assert api.get("/metrics").status_code == 401
    assert api.get("/metrics", headers=reader).status_code == 200
    server_logs = " ".join(r.getMessage() for r in caplog.records
                           if r.name.startswith(("headgate", "werkzeug", "gunicorn")))
    assert "s3cret-token" not in server_logs and "reader-token" not in server_logs


def test_tokens_file(tmp_path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# ops\nfull-one\nread-one ro\nfull-two rw  # comment\n")
    s = Settings.from_env({"HG_API_TOKENS_FILE": str(path), "HG_API_TOKENS": "env-one"})
    assert s.api_tokens == ("env-one", "full-one", "full-two")
    assert s.api_read_tokens == ("read-one",)
    assert "full-one" not in repr(s)
    assert s.remote_bind_refusal("0.0.0.0:8080") is None
    path.write_text("tok admin\n")
    with pytest.raises(headgate.services.config.ConfigError, match="line 1"):
        Settings.from_env({"HG_API_TOKENS_FILE": str(path)})


# -- routing errors, liveness, readiness ---------------------------------------------

def test_unknown_routes_and_methods_are_json(api: Api) -> None:
    r = api.get("/nope")
    assert (r.status_code, r.json()) == (404, {"error": "not found"})
    assert r.headers["Content-Type"] == "application/json"
    r = requests.patch(api.url + "/jobs", timeout=10)
    assert (r.status_code, r.json()) == (405, {"error": "method not allowed"})
    assert "GET" in r.headers["Allow"] and "POST" in r.headers["Allow"]
    r = requests.post(api.url + "/jobs/x/y/z", headers={"Idempotency-Key": "k"}, timeout=10)
    assert (r.status_code, r.json()) == (404, {"error": "not found"})
    assert api.get("/api/v1").status_code == 404


class RecordingStore:
    """Delegates to a real store, recording which store methods a request used."""

    def __init__(self, inner: Any, fail_ping: bool = False) -> None:
        self._inner = inner
        self.calls: list[str] = []
        self.fail_ping = fail_ping

    def ping(self) -> None:
        self.calls.append("ping")
        if self.fail_ping:
            raise StoreUnavailable("store unavailable: database is locked")
        self._inner.ping()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if callable(attr):
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(name)
                return attr(*args, **kwargs)
            return wrapper
        return attr


def test_readyz_is_one_ping_and_healthz_touches_nothing(servers) -> None:
    inner = headgate.open_store(servers.store_url)
    try:
        recording = RecordingStore(inner)
        api = servers.start(store=recording, background=False)
        time.sleep(0.1)
        recording.calls.clear()
        for path in ("/healthz", "/api/v1/healthz"):
            r = api.get(path)
            assert (r.status_code, r.text) == (200, "ok")
        assert recording.calls == []
        for path in ("/readyz", "/api/v1/readyz"):
            r = api.get(path)
            assert (r.status_code, r.text) == (200, "ready")
        assert recording.calls == ["ping", "ping"]  # no count, no scan: one lookup each
        recording.fail_ping = True
        r = api.get("/api/v1/readyz")
        assert (r.status_code, r.json()) == (503, {"error": "store unavailable: database is "
                                                            "locked"})
        assert api.get("/readyz").status_code == 503
    finally:
        servers.stop_all()
        inner.close()


def test_unexpected_errors_are_a_bare_json_500(make_api) -> None:
    """A broken embedding hook is a 500 envelope: no trace, no HTML, key released."""
    calls = []

    def broken(context, batch, call_next):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("secret internals")
        return call_next(batch)

    api = make_api(middleware=[broken])
    r = api.post("/jobs", json={"kind": "k", "payload": ""}, key="k")
    assert (r.status_code, r.json()) == (500, {"error": "enqueue middleware failed"})
    r = api.post("/jobs", json={"kind": "k", "payload": ""}, key="k")  # runs again
    assert r.status_code == 201 and "replayed" not in r.json()
