"""Operations residue (issue 24) with real processes and real HTTP on both backends:
finished jobs reach live views, the uniqueness table is pruned, the fleet's job
latency histograms are exported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support import headgate_cmd, wait_for
from test_api_events import open_stream

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture
def worker_process(store_url: str, tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen]]:
    """Starts `headgate worker` (tests/test_worker_app.py) on the test's store."""
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
        env["HG_TEST_DIR"] = str(tmp_path)
        proc = subprocess.Popen(
            [*headgate_cmd(), "worker", "--app", "test_worker_app:make_worker",
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
        assert "default" in json.loads(sse.next_event()["data"])["queues"]  # the enqueues
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
