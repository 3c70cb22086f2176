"""An adaptive rate class learns a downstream's limit: a local HTTP server with its own
token bucket (LIMIT calls a second, a small burst) answers 429 past it; two real
`headgate worker` processes share the class `downstream`, whose tasks call the server
and raise headgate.Throttled on a 429. The class starts at twice the server's limit;
the store, on both engines, cuts it on throttles (once per window for the whole fleet)
and raises it on successes. Asserted on counts: after the limit first comes within 25 %
of the server's, the limit it holds stays within 25 % of it on average, and fewer than
5 % of the calls get a 429. The run is bounded by calls made, not by time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support import headgate_cmd

import headgate
from headgate.core.adaptive import Adaptive
from headgate.core.records import RateClassChange

TESTS_DIR = Path(__file__).resolve().parents[1]
LIMIT = 20  # the server's true limit, calls per second
SERVER_BURST = 10
WINDOW_MS = 1000
# The class starts at twice the server's limit, its burst an eighth of its limit.
START, START_BURST = 2 * LIMIT, LIMIT // 4
BOUNDS = Adaptive(min=2, max=5 * LIMIT, decrease_factor=0.8, increase_step=1)
CALLS = 600  # the run ends after this many calls (about 30 s at the limit)
JOBS = 1_000  # more than the run can take: the class, not the backlog, sets the pace
SETTLE_MS = 2 * WINDOW_MS  # after convergence: the throttles of calls already admitted


class Downstream(ThreadingHTTPServer):
    """A token bucket of LIMIT per second holding at most SERVER_BURST; every call is
    logged as (wall ms, status)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.tokens = float(SERVER_BURST)
        self.at = time.monotonic()
        self.calls: list[tuple[int, int]] = []

    def take(self) -> int:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(float(SERVER_BURST), self.tokens + (now - self.at) * LIMIT)
            self.at = now
            status = 200 if self.tokens >= 1 else 429
            if status == 200:
                self.tokens -= 1
            self.calls.append((int(time.time() * 1000), status))
            return status


class _Handler(BaseHTTPRequestHandler):
    server: Downstream

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
        status = self.server.take()
        self.send_response(status)
        if status == 429:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    server = Downstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _workers(store_url: str, url: str, tmp_path: Path) -> list[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["HG_TEST_DOWNSTREAM"] = url
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    procs = []
    for i in range(2):
        log = (tmp_path / f"w{i}.log").open("ab")
        procs.append(subprocess.Popen(
            [*headgate_cmd(), "worker", "--app", "adaptive_app:app", "--store", store_url,
             "--concurrency", "8", "--no-duties"],
            env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True))
    return procs


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def _mean_limit(history: list[RateClassChange], start_ms: int, end_ms: int) -> float:
    """The limit the class held over [start, end], weighted by how long it held it."""
    level, total, weighted = None, 0, 0.0
    points = [(h.at_ms, h.limit_per_window) for h in history]
    for (at, limit), (nxt, _) in zip(points, [*points[1:], (end_ms, 0)], strict=True):
        lo, hi = max(at, start_ms), min(nxt, end_ms)
        if hi > lo:
            weighted += limit * (hi - lo)
            total += hi - lo
        level = limit
    assert total > 0 and level is not None
    return weighted / total


def test_two_workers_learn_the_downstream_limit(store_url: str, tmp_path: Path,
                                                downstream: Downstream) -> None:
    store = headgate.open_store(store_url)
    try:
        store.upsert_rate_class("downstream", START, WINDOW_MS, burst=START_BURST,
                                adaptive=BOUNDS)
        headgate.Client(store).enqueue_many([
            headgate.Envelope(kind="adaptive_app.call_downstream", queue="default",
                              rate_class="downstream",
                              payload=json.dumps({"args": [i], "kwargs": {}}).encode())
            for i in range(JOBS)])
        url = f"http://127.0.0.1:{downstream.server_address[1]}"
        procs = _workers(store_url, url, tmp_path)
        try:
            deadline = time.monotonic() + 90  # a bound on a broken run, not a measure
            while len(downstream.calls) < CALLS and time.monotonic() < deadline:
                assert all(p.poll() is None for p in procs), (tmp_path / "w0.log").read_text()
                time.sleep(0.2)
        finally:
            _stop(procs)
        calls = list(downstream.calls)
        assert len(calls) >= CALLS, f"only {len(calls)} calls were made"
        history = store.rate_class_history("downstream", 0, 10_000)
        end = calls[-1][0]
        converged = next((h.at_ms for h in history if h.change == "decrease"
                          and h.limit_per_window <= 1.25 * LIMIT), None)
        assert converged is not None, history
        after = [status for at, status in calls if at >= converged + SETTLE_MS]
        throttled = after.count(429)
        mean = _mean_limit(history, converged + SETTLE_MS, end)
        total_429 = sum(1 for _, status in calls if status == 429)
        report = (f"{len(calls)} calls, {total_429} answered 429; after convergence "
                  f"{len(after)} calls, {throttled} answered 429; mean limit {mean:.1f}; "
                  f"cuts {[h.limit_per_window for h in history if h.change == 'decrease']}")
        print(report)
        assert len(after) >= CALLS // 2, report
        assert throttled < 0.05 * len(after), report
        assert 0.75 * LIMIT <= mean <= 1.25 * LIMIT, report
        # Every job still counts its attempts as never failed: throttles spend none.
        jobs = store.list_jobs(headgate.JobFilter(queue="default"), limit=200).jobs
        assert all(j.attempt == 0 for j in jobs)
    finally:
        store.close()
