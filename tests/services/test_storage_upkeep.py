"""Retention keeps storage bounded: lifecycle unique keys whose job was deleted, and
history/latency buckets past the horizon, go in bounded batches; /system/storage
reports both (real HTTP server, real store, the real retention duty, both backends)."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from support import wait_for

from headgate.services.config import DEFAULT_HISTORY_RETENTION_MS
from headgate.services.duties import DutyRunner

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]

DAY_MS = 24 * 3_600_000


def _key(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _keys(api: Api) -> dict[str, str]:
    with api.store.db.write() as (conn, _):  # type: ignore[attr-defined]
        rows = conn.execute("SELECT key, job_id FROM uniques").fetchall()
    return {bytes(k).split(b"\x00")[-1].decode(): str(j) for k, j in rows}


def _run_retention(api: Api, until, what: str) -> None:
    runner = DutyRunner(api.store, duties=["retention"], intervals={"retention": 0.05},
                        batch_size=2)
    runner.start()
    try:
        wait_for(until, 20, what)
    finally:
        runner.stop()


def test_orphaned_lifecycle_keys_are_pruned_and_live_ones_kept(api: Api) -> None:
    gone = api.enqueue(unique_key=_key("gone"))
    live = api.enqueue(unique_key=_key("live"))
    for i in range(3):  # more keys than a batch: the sweep continues across batches
        api.enqueue(unique_key=_key(f"other:{i}"))
    assert api.post(f"/jobs/{gone}/cancel").status_code == 204
    assert api.delete(f"/jobs/{gone}").status_code in (200, 204)
    assert _keys(api)["gone"] == gone  # the delete leaves the key: the sweep takes it
    before = api.get("/system/storage").json()["uniques"]
    assert before["orphans"] == {"pruned": 0, "passes": 0, "pass_at_ms": None}

    _run_retention(api, lambda: api.get("/system/storage").json()["uniques"]["orphans"]
                   ["passes"] >= 1, "a sweep pass")
    after = api.get("/system/storage").json()["uniques"]
    assert after["orphans"]["pruned"] == 1 and after["orphans"]["pass_at_ms"] > 0
    assert after["rows"] == before["rows"] - 1
    keys = _keys(api)
    assert "gone" not in keys and keys["live"] == live
    # The live key still holds; the pruned one is free again.
    r = api.post("/jobs", json={"kind": "email.send", "payload": "", "unique_key": _key("live")})
    assert r.status_code == 409, r.text
    assert api.enqueue(unique_key=_key("gone")) != gone


def test_buckets_past_the_horizon_are_deleted_and_recent_ones_kept(api: Api) -> None:
    now = api.store.now_ms()
    old = now - DEFAULT_HISTORY_RETENTION_MS - DAY_MS
    recent = now - DAY_MS  # inside the console's 24-hour chart
    old, recent = old - old % 60_000, recent - recent % 60_000
    with api.store.db.write() as (conn, _):  # type: ignore[attr-defined]
        for at in (old, old + 60_000, old + 120_000, recent):
            conn.execute("INSERT INTO queue_history (queue, bucket_ms, arrived) "
                         "VALUES ('q', ?, 1)", (at,))
            conn.execute("INSERT INTO queue_latency (queue, bucket_ms, metric, le_ms, n, "
                         "sum_ms) VALUES ('q', ?, 'wait', 5, 1, 3)", (at,))
    buckets = api.get("/system/storage").json()["buckets"]
    assert buckets["retention_ms"] == DEFAULT_HISTORY_RETENTION_MS
    for table in ("history", "latency"):
        assert buckets[table] == {"rows": 4, "expired": 3, "oldest_bucket_ms": old}

    _run_retention(api, lambda: all(
        api.get("/system/storage").json()["buckets"][t]["expired"] == 0
        for t in ("history", "latency")), "the old buckets to go")
    buckets = api.get("/system/storage").json()["buckets"]
    for table in ("history", "latency"):
        assert buckets[table] == {"rows": 1, "expired": 0, "oldest_bucket_ms": recent}
    assert [b.at_ms for b in api.store.history("q", 0)] == [recent]
