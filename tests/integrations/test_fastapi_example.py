"""examples/fastapi_app.py through FastAPI's TestClient, with a real
`headgate worker --app fastapi_app:tasks` process, on both backends; and run as a
script (`python …/fastapi_app.py serve` and `… worker`, uvicorn and a worker process)
from a directory outside the checkout, over real HTTP."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient
from integration_support import free_port, worker

from headgate.core import JobFilter

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def example(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("THUMBNAILS_STORE", store_url)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delitem(sys.modules, "fastapi_app", raising=False)
    module = importlib.import_module("fastapi_app")
    try:
        yield module
    finally:
        module.tasks.close()


def test_enqueue_and_await_a_result_through_the_api(
        example: ModuleType, store_url: str, tmp_path: Path) -> None:
    with TestClient(example.api) as client:
        made = client.post("/thumbnails", json={"image": "cat.png", "width": 128})
        assert made.status_code == 202
        job_id = made.json()["job_id"]
        waiting = client.get(f"/thumbnails/{job_id}")  # no worker yet: still available
        assert (waiting.status_code, waiting.json()["state"]) == (202, "available")
        # Another producer's job the task refuses (the API refuses such input itself).
        bad = example.render.enqueue("notes.txt", width=64)
        with worker(store_url, tmp_path, app="fastapi_app:tasks", cwd=EXAMPLES):
            done = client.get(f"/thumbnails/{job_id}", params={"wait": 20})
            failed = client.get(f"/thumbnails/{bad.id}", params={"wait": 20})
        assert done.status_code == 200
        assert done.json() == {"job_id": job_id, "state": "completed", "result": {
            "image": "cat.png", "width": 128, "thumbnail": "cat.png@128w"}}
        assert_failed_answer(failed.status_code, failed.json(), bad.id)
        assert client.get("/thumbnails/no-such-job").status_code == 404
        for refused in ({"image": "x.png", "width": 0}, {"image": "notes.txt", "width": 64}):
            answer = client.post("/thumbnails", json=refused)
            assert answer.status_code == 422, refused  # FastAPI's validation
        assert client.get(f"/thumbnails/{job_id}", params={"wait": 31}).status_code == 422
    # Nothing was enqueued by the refused requests.
    assert sorted(j.id for j in example.tasks.store.list_jobs(JobFilter()).jobs) \
        == sorted([job_id, bad.id])


def assert_failed_answer(status: int, body: dict[str, Any], job_id: str) -> None:
    """A failed job: a 500 with the task's error line only, no frame or server path."""
    assert status == 500, body
    assert (body["job_id"], body["state"]) == (job_id, "archived")
    error = body["error"]
    assert error.endswith("ValueError: not an image: notes.txt"), error
    # The job's history holds the frames too (their file paths): not the answer.
    assert "\n" not in error and "fastapi_app.py" not in error, error


def test_a_store_it_cannot_reach_is_a_503_without_its_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "jobs.db"
    monkeypatch.setenv("THUMBNAILS_STORE", f"sqlite:///{missing}")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delitem(sys.modules, "fastapi_app", raising=False)
    module = importlib.import_module("fastapi_app")
    try:
        with TestClient(module.api, raise_server_exceptions=False) as client:
            answer = client.post("/thumbnails", json={"image": "cat.png", "width": 8})
    finally:
        module.tasks.close()
    assert answer.status_code == 503
    assert answer.json() == {"detail": "job store unavailable"}
    assert str(tmp_path) not in answer.text


def _http(method: str, url: str, body: dict[str, Any] | None = None
          ) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@contextmanager
def _script(tmp_path: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    log = tmp_path / f"{args[0]}.log"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HG_", "THUMBNAILS_")) and k != "PYTHONPATH"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, str(EXAMPLES / "fastapi_app.py"), *args],
                                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc.returncode not in (0, -signal.SIGTERM):
            print(log.read_text())


def test_the_script_runs_api_and_worker_from_any_directory(tmp_path: Path) -> None:
    # tmp_path is outside the checkout and nothing points at it: both processes open the
    # default store, headgate.db in the directory they run in.
    assert not tmp_path.resolve().is_relative_to(EXAMPLES.parent)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with _script(tmp_path, "serve", "--port", str(port)) as api:
        deadline = time.monotonic() + 30
        while True:
            assert api.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                status, made = _http("POST", f"{base}/thumbnails",
                                     {"image": "cat.png", "width": 32})
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                time.sleep(0.1)
        assert status == 202, made
        assert (tmp_path / "headgate.db").exists()
        with _script(tmp_path, "worker", "--concurrency", "1") as runner:
            status, done = _http("GET", f"{base}/thumbnails/{made['job_id']}?wait=25")
            assert runner.poll() is None, (tmp_path / "worker.log").read_text()
        assert status == 200, done
        assert done["result"] == {"image": "cat.png", "width": 32, "thumbnail": "cat.png@32w"}
        status, refused = _http("POST", f"{base}/thumbnails",
                                {"image": "notes.txt", "width": 32})
        assert status == 422, refused
