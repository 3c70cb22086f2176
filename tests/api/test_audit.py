"""The audit log over real HTTP: accepted operator actions are recorded with the token's
name, refused ones and replays are not, `GET /api/v1/audit` pages and filters them, and
the retention duty ages them out (both backends)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import pytest
from support import wait_for

from headgate.services.config import (
    DEFAULT_AUDIT_RETENTION_MS,
    ConfigError,
    Settings,
    read_tokens_file,
)
from headgate.services.duties import DutyRunner

if TYPE_CHECKING:
    from collections.abc import Callable

    from api_helpers import Api

pytest_plugins = ["api_helpers"]

ALICE = {"Authorization": "Bearer alice-secret-token"}
BOB = {"Authorization": "Bearer bob-secret-token"}
READER = {"Authorization": "Bearer reader-secret-token"}


def _named(make_api: Callable[..., Api]) -> Api:
    return make_api(settings=Settings(
        api_tokens=("alice-secret-token", "bob-secret-token"),
        api_read_tokens=("reader-secret-token",),
        api_token_names=(("alice-secret-token", "alice"),)))


def _entries(api: Api, **params: Any) -> list[dict[str, Any]]:
    r = api.get("/audit", headers=ALICE, params=params)
    assert r.status_code == 200, r.text
    return list(r.json()["entries"])


def test_operator_actions_are_recorded_with_the_token_name(make_api) -> None:
    api = _named(make_api)
    job = _enqueue(api, "emails")
    assert api.post(f"/jobs/{job}/cancel", headers=ALICE).status_code == 204
    assert api.post(f"/jobs/{job}/retry", headers=BOB).status_code == 204
    for _ in range(3):
        _enqueue(api, "emails")
    dry = api.post("/jobs/bulk", headers=ALICE, json={
        "action": "cancel", "selector": {"queue": "emails"}, "dry_run": True})
    assert dry.status_code == 202
    bulk = api.post("/jobs/bulk", headers=ALICE, json={
        "action": "cancel", "selector": {"queue": "emails", "state": "available"}})
    assert bulk.status_code == 202, bulk.text
    put = {"limit": 5, "window_ms": 1000}
    assert api.put("/rate-classes/smtp", headers=ALICE, json=put).status_code == 200
    assert api.put("/rate-classes/smtp", headers=ALICE,
                   json={**put, "paused": True}).status_code == 200
    assert api.put("/rate-classes/smtp", headers=ALICE,
                   json={**put, "paused": True, "limit": 9}).status_code == 200
    assert api.post("/queues/emails/pause", headers=ALICE).status_code == 204

    entries = _entries(api)
    got = [(e["actor"], e["action"], e["target"]) for e in entries]
    bob = "token:" + hashlib.sha256(b"bob-secret-token").hexdigest()[:6]
    assert got == [
        ("alice", "queue.pause", "queue:emails"),
        ("alice", "rate_class.edit", "rate_class:smtp"),
        ("alice", "rate_class.pause", "rate_class:smtp"),
        ("alice", "rate_class.create", "rate_class:smtp"),
        ("alice", "bulk.cancel", "jobs"),  # the dry run changed nothing: not recorded
        (bob, "job.retry", f"job:{job}"),
        ("alice", "job.cancel", f"job:{job}"),
    ]
    by_action = {e["action"]: e for e in entries}
    assert by_action["bulk.cancel"]["detail"] == {
        "selector": {"queue": "emails", "state": "available"},
        "operation_id": bulk.json()["id"], "total_estimated": 4, "total_capped": False}
    assert by_action["bulk.cancel"]["status"] == 202
    assert by_action["job.retry"]["status"] == 204
    assert by_action["rate_class.edit"]["detail"] == {
        "limit": 9, "window_ms": 1000, "burst": 9, "paused": True,
        "before": {"limit": 5, "window_ms": 1000, "burst": 5, "paused": True}}
    assert all(e["outcome"] == "ok" for e in entries)
    ats = [e["at_ms"] for e in entries]
    assert ats == sorted(ats, reverse=True) and ats[-1] <= api.store.now_ms()
    # No token ever reaches the log.
    assert "secret" not in str(entries)


def test_refused_requests_and_replays_record_nothing(make_api) -> None:
    api = _named(make_api)
    job = _enqueue(api, "q")
    assert api.post(f"/jobs/{job}/retry", headers=ALICE).status_code == 409  # available
    assert api.post(f"/jobs/{job}/cancel", headers=READER).status_code == 403
    assert api.post(f"/jobs/{job}/cancel",
                    headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert api.delete("/rate-classes/nope", headers=ALICE).status_code == 404
    assert api.put("/rate-classes/x", headers=ALICE, json={"limit": "a"}).status_code == 422
    assert _entries(api) == []
    first = api.post(f"/jobs/{job}/cancel", headers=ALICE, key="same-key")
    replay = api.post(f"/jobs/{job}/cancel", headers=ALICE, key="same-key")
    assert (first.status_code, replay.status_code) == (204, 204)
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert [e["action"] for e in _entries(api)] == ["job.cancel"]


def test_a_selection_lists_its_ids_and_says_when_some_failed(make_api) -> None:
    api = _named(make_api)
    jobs = [_enqueue(api, "q") for _ in range(3)]
    assert api.post(f"/jobs/{jobs[0]}/cancel", headers=ALICE).status_code == 204
    r = api.post("/jobs/actions", headers=ALICE,
                 json={"action": "retry", "ids": jobs[:2]})
    assert r.status_code == 200 and len(r.json()["failed"]) == 1
    entry = _entries(api, action="jobs.retry")[0]
    assert (entry["target"], entry["outcome"]) == ("jobs", "partial")
    assert entry["detail"] == {"ids": [jobs[0]], "succeeded": 1, "failed": 1,
                               "failed_ids": [jobs[1]]}


def test_settings_and_deletes_are_recorded(make_api) -> None:
    api = _named(make_api)
    assert api.put("/concurrency-limits/c1", headers=ALICE, json={
        "queue": "q", "max_concurrent": 2, "on_saturated": "queue"}).status_code == 200
    assert api.put("/concurrency-limits/c1", headers=ALICE, json={
        "queue": "q", "max_concurrent": 3, "on_saturated": "queue"}).status_code == 200
    assert api.delete("/concurrency-limits/c1", headers=ALICE).status_code == 204
    assert api.put("/queues/q/enqueue-limit", headers=ALICE,
                   json={"max_unfinished_jobs": 10}).status_code == 200
    assert api.put("/periodic/nightly", headers=ALICE, json={
        "kind": "report", "spec": "0 3 * * *"}).status_code == 200
    assert api.put("/periodic/nightly", headers=ALICE, json={
        "kind": "report", "spec": "0 3 * * *", "paused": True}).status_code == 200
    assert api.delete("/periodic/nightly", headers=ALICE).status_code == 204
    actions = [(e["action"], e["target"]) for e in _entries(api)]
    assert actions == [
        ("schedule.delete", "schedule:nightly"),
        ("schedule.pause", "schedule:nightly"),
        ("schedule.create", "schedule:nightly"),
        ("enqueue_limit.set", "queue:q"),
        ("concurrency_limit.delete", "concurrency_limit:c1"),
        ("concurrency_limit.edit", "concurrency_limit:c1"),
        ("concurrency_limit.create", "concurrency_limit:c1"),
    ]


def test_pages_with_a_cursor_and_filters(make_api) -> None:
    api = _named(make_api)
    for queue in ("a", "b", "a", "c", "a"):
        assert api.post(f"/queues/{queue}/pause", headers=ALICE).status_code == 204
    page = api.get("/audit", headers=ALICE, params={"limit": 2}).json()
    assert [e["target"] for e in page["entries"]] == ["queue:a", "queue:c"]
    page2 = api.get("/audit", headers=ALICE,
                    params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert [e["target"] for e in page2["entries"]] == ["queue:a", "queue:b"]
    page3 = api.get("/audit", headers=ALICE,
                    params={"limit": 2, "cursor": page2["next_cursor"]}).json()
    assert [e["target"] for e in page3["entries"]] == ["queue:a"]
    assert page3["next_cursor"] is None
    assert len(_entries(api, target="queue:a")) == 3
    assert len(_entries(api, target_prefix="queue:")) == 5
    assert _entries(api, target_prefix="rate_class:") == []
    assert len(_entries(api, action="queue.pause")) == 5
    assert _entries(api, action="queue.resume") == []
    newest = _entries(api)[0]
    assert [e["id"] for e in _entries(api, since_ms=newest["at_ms"])][0] == newest["id"]
    assert _entries(api, since_ms=newest["at_ms"] + 3_600_000) == []
    # A read-only token may read the log.
    assert api.get("/audit", headers=READER).status_code == 200
    assert api.get("/audit").status_code == 401


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 201}, {"cursor": "x"},
                                    {"since_ms": "soon"}, {"cursor": -1}])
def test_bad_query_parameters_are_400(make_api, params: dict[str, Any]) -> None:
    api = _named(make_api)
    r = api.get("/audit", headers=ALICE, params=params)
    assert r.status_code == 400, r.text
    assert "error" in r.json()


def test_without_tokens_the_actor_is_local(api: Api) -> None:
    assert api.post("/queues/q/pause").status_code == 204
    assert [(e["actor"], e["action"]) for e in api.get("/audit").json()["entries"]] == [
        ("local", "queue.pause")]


def test_retention_deletes_entries_past_the_horizon(api: Api) -> None:
    assert api.post("/queues/q/pause").status_code == 204
    recent = api.get("/audit").json()["entries"][0]
    old_at = api.store.now_ms() - DEFAULT_AUDIT_RETENTION_MS - 60_000
    with api.store.db.write() as (conn, _):  # type: ignore[attr-defined]
        for i in range(3):
            conn.execute("INSERT INTO audit_log (at_ms, actor, action, target, status, "
                         "outcome, detail) VALUES (?, 'old', 'queue.pause', ?, 204, 'ok', "
                         "'{}')", (old_at + i, f"queue:{i}"))
    assert len(api.get("/audit").json()["entries"]) == 4
    runner = DutyRunner(api.store, duties=["retention"], intervals={"retention": 0.05},
                        batch_size=2)
    runner.start()
    try:
        wait_for(lambda: len(api.get("/audit").json()["entries"]) == 1, 20,
                 "the old entries to go")
    finally:
        runner.stop()
    assert api.get("/audit").json()["entries"] == [recent]


def test_tokens_file_names_tokens(tmp_path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# ops\nalpha-token rw name=alice\nbeta-token ro name=support.bot\n"
                    "gamma-token\ndelta-token name=dora  # comment\nepsilon name=eve ro\n")
    parsed = read_tokens_file(str(path))
    assert parsed.full == ("alpha-token", "gamma-token", "delta-token")
    assert parsed.read_only == ("beta-token", "epsilon")
    assert dict(parsed.names) == {"alpha-token": "alice", "beta-token": "support.bot",
                                  "delta-token": "dora", "epsilon": "eve"}
    settings = Settings.from_env({"HG_API_TOKENS_FILE": str(path)})
    assert "alice" not in repr(settings) and "alpha-token" not in repr(settings)
    for bad in ("tok name=\n", "tok name=a b\n", "tok name=-x\n", "tok ro rw\n",
                "tok name=x\nother name=x\n", "tok name=x name=y\n", "tok admin\n"):
        path.write_text(bad)
        with pytest.raises(ConfigError, match="HG_API_TOKENS_FILE line"):
            read_tokens_file(str(path))
    with pytest.raises(ConfigError, match="HG_AUDIT_RETENTION_MS"):
        Settings.from_env({"HG_AUDIT_RETENTION_MS": "60"})
    assert Settings.from_env({}).audit_retention_ms == DEFAULT_AUDIT_RETENTION_MS


def _enqueue(api: Api, queue: str) -> str:
    r = api.post("/jobs", headers=ALICE if _needs_token(api) else {},
                 json={"kind": "k", "payload": "", "queue": queue})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _needs_token(api: Api) -> bool:
    return api.get("/jobs/counts").status_code == 401
