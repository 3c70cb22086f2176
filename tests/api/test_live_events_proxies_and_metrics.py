"""Operations residue with real processes and real HTTP on both backends:
finished jobs reach live views, the uniqueness table is pruned, the fleet's job
latency histograms are exported."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import requests
from support import headgate_cmd, wait_for
from test_events import open_stream

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

TESTS_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture
def worker_process(store_url: str, tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen]]:
    """Starts `headgate worker` (tests/worker_app.py) on the test's store."""
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
        env["HG_TEST_DIR"] = str(tmp_path)
        proc = subprocess.Popen(
            [*headgate_cmd(), "worker", "--app", "worker_app:make_worker",
             "--store", store_url, "--no-duties", "--log-level", "WARNING"],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- finished jobs reach /api/v1/events ------------------------------------------------

def test_completions_and_failures_by_a_worker_process_reach_the_stream(
    api: Api, worker_process: Callable[[], subprocess.Popen]
) -> None:
    """On PostgreSQL a plain ack sent no NOTIFY, so a stream never heard a completion;
    the acking store now announces its queues, coalesced per 200 ms."""
    sse = open_stream(api)
    try:
        assert "connected" in sse.frames.get(timeout=10).get("comments", [])
        listening = getattr(api.store, "listening", None)
        if callable(listening):
            assert listening(10)
        api.enqueue("ok")
        api.enqueue("always-fail", max_attempts=1)
        # The enqueues' event; the listener's "anything may have happened" on connecting
        # names no queue and may come first when the enqueues take longer than the
        # 200 ms it waits to coalesce.
        first = json.loads(sse.next_event()["data"])["queues"]
        if first == []:
            first = json.loads(sse.next_event()["data"])["queues"]
        assert "default" in first
        worker_process()
        # Every event names `default`; the last one must come after both jobs finished.
        deadline = time.monotonic() + 30
        while True:
            event = sse.next_event(timeout=max(0.1, deadline - time.monotonic()))
            assert json.loads(event["data"])["queues"] == ["default"]
            counts = api.get("/jobs/counts?queue=default").json()["counts"]
            if (counts["completed"], counts["archived"]) == (1, 1):
                break
    finally:
        sse.close()


# -- HG_TRUSTED_PROXIES ----------------------------------------------------------------

TOKEN = "proxy-test-token"
LIMIT = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Starts a real `headgate serve` with tokens and a failed-attempt limit of 3;
    returns its base URL."""
    procs: list[subprocess.Popen] = []

    def start(trusted: str | None) -> str:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
        env.update(HG_API_TOKENS=TOKEN, HG_AUTH_FAILURES_PER_MINUTE=str(LIMIT))
        if trusted is not None:
            env["HG_TRUSTED_PROXIES"] = trusted
        db = tmp_path / f"serve{len(procs)}.db"
        proc = subprocess.Popen(
            [*headgate_cmd(), "serve", "--store", f"sqlite:///{db}", "--addr",
             f"127.0.0.1:{port}", "--threads", "4", "--no-duties"],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return requests.get(base + "/healthz", timeout=1).status_code == 200
            except (requests.ConnectionError, requests.Timeout):  # a loaded box: late
                return False

        wait_for(up, 30, "serve to answer")
        return base

    yield start
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _meta(base: str, token: str, **headers: str) -> int:
    headers["Authorization"] = f"Bearer {token}"
    return requests.get(base + "/api/v1/meta", headers=headers, timeout=10).status_code


def _lock_out(base: str, **headers: str) -> None:
    for _ in range(LIMIT):
        assert _meta(base, "wrong", **headers) == 401
    assert _meta(base, TOKEN, **headers) == 429  # even the right token, from there


@pytest.mark.parametrize("trusted", ["127.0.0.1", "10.0.0.0/8,127.0.0.0/8", "1"])
def test_behind_a_trusted_proxy_the_throttle_counts_each_forwarded_client(
    serve: Callable[..., str], trusted: str
) -> None:
    base = serve(trusted)
    _lock_out(base, **{"X-Forwarded-For": "203.0.113.7"})
    # Another client behind the same proxy is not locked out.
    assert _meta(base, TOKEN, **{"X-Forwarded-For": "203.0.113.8"}) == 200
    # The client is the address the trusted proxy saw, whatever the client claimed.
    assert _meta(base, TOKEN, **{"X-Forwarded-For": "198.51.100.9, 203.0.113.7"}) == 429
    # RFC 7239 Forwarded is read the same way.
    _lock_out(base, Forwarded='for="198.51.100.1:4711";proto=https')
    assert _meta(base, TOKEN, Forwarded="for=198.51.100.2") == 200
    assert _meta(base, TOKEN, Forwarded="for=198.51.100.1") == 429


@pytest.mark.parametrize("trusted", [None, "10.0.0.0/8"])
def test_without_a_trusted_proxy_forwarding_headers_are_ignored(
    serve: Callable[..., str], trusted: str | None
) -> None:
    """Not configured, or the peer is not a listed proxy: any client could have sent
    the header, so failures count against the peer's own address."""
    base = serve(trusted)
    _lock_out(base, **{"X-Forwarded-For": "203.0.113.7"})
    assert _meta(base, TOKEN, **{"X-Forwarded-For": "203.0.113.8"}) == 429
    assert _meta(base, TOKEN) == 429


# -- unique keys are pruned ------------------------------------------------------------

def test_expired_unique_keys_are_pruned_by_retention_and_reported(api: Api) -> None:
    """Throttle-style keys (one per window) used to stay forever. Retention deletes
    window keys past their window in bounded batches; lifecycle keys and keys still in
    their window stay; /system/storage reports both figures."""
    import base64

    from headgate.services.duties import DutyRunner

    def key(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    for i in range(5):
        api.enqueue(unique_key=key(f"throttle:{i}"), unique_window_ms=1)
    api.enqueue(unique_key=key("window:open"), unique_window_ms=3_600_000)
    api.enqueue(unique_key=key("lifecycle"))  # window 0: held while the job is live
    time.sleep(0.05)  # past the 1 ms windows
    storage = api.get("/system/storage").json()
    rows_before = storage["uniques"]["rows"]
    assert rows_before >= 7 and storage["uniques"]["expired"] == 5
    assert storage["engine"] in ("sqlite", "postgres")
    # Bounded: a batch of 2 takes two, oldest first.
    assert api.store.prune_uniques(2) == 2
    assert api.get("/system/storage").json()["uniques"] | {"orphans": None} == {
        "rows": rows_before - 2, "expired": 3, "orphans": None}
    # The retention duty takes the rest.
    runner = DutyRunner(api.store, duties=["retention"], intervals={"retention": 0.05},
                        batch_size=2)
    runner.start()
    try:
        wait_for(lambda: api.get("/system/storage").json()["uniques"]["expired"] == 0, 20,
                 "retention to prune the expired keys")
    finally:
        runner.stop()
    assert api.get("/system/storage").json()["uniques"] | {"orphans": None} == {
        "rows": rows_before - 5, "expired": 0, "orphans": None}
    # The open window still holds: the same key is a duplicate.
    r = api.post("/jobs", json={"kind": "email.send", "payload": "",
                                "unique_key": key("window:open"), "unique_window_ms": 3_600_000})
    assert r.status_code == 409, r.text
    # An expired key that was pruned can be claimed again.
    api.enqueue(unique_key=key("throttle:0"), unique_window_ms=3_600_000)


# -- job latency histograms ------------------------------------------------------------

def _histogram(text: str, name: str, queue: str) -> dict[str, float]:
    """`{le: cumulative count, "_count": n, "_sum": s}` of one queue's histogram."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(name) or f'queue="{queue}"' not in line:
            continue
        series, value = line.rsplit(" ", 1)
        if series.startswith(name + "_bucket"):
            out[series.split('le="', 1)[1].split('"', 1)[0]] = float(value)
        elif series.startswith(name + "_count"):
            out["_count"] = float(value)
        elif series.startswith(name + "_sum"):
            out["_sum"] = float(value)
    return out


def test_wait_and_run_histograms_count_the_jobs_a_worker_ran(
    api: Api, worker_process: Callable[[], subprocess.Popen]
) -> None:
    """Written by the store at admit and ack time (here by a worker process the server
    knows nothing of), read from /metrics over HTTP."""
    n = 12
    ids = [api.enqueue("ok") for _ in range(n - 2)]
    ids.append(api.enqueue("ok", retention_ms=0))  # deleted straight from running
    ids.append(api.enqueue("always-fail", max_attempts=1))  # archived: terminal too
    worker_process()

    def done() -> bool:
        counts = api.get("/jobs/counts?queue=default").json()["counts"]
        return counts["completed"] + counts["archived"] == n - 1 and counts["running"] == 0

    wait_for(done, 30, "the worker to run every job")
    text = api.get("/metrics").text
    for name in ("headgate_job_wait_seconds", "headgate_job_run_seconds"):
        h = _histogram(text, name, "default")
        assert h["_count"] == n and h["+Inf"] == n, (name, h)
        bounds = [k for k in h if not k.startswith("_")]
        assert bounds[0] == "0.005" and bounds[-1] == "+Inf" and len(bounds) == 17
        counts = [h[b] for b in bounds]
        assert counts == sorted(counts)  # cumulative
        assert h["_sum"] >= 0
    assert "# TYPE headgate_job_wait_seconds histogram" in text
