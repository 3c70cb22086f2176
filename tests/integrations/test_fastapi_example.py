"""examples/fastapi_app.py (issue 20 item 5) through FastAPI's TestClient, with a real
`headgate worker --app fastapi_app:tasks` process, on both backends."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient
from integration_support import worker

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
        bad = client.post("/thumbnails", json={"image": "notes.txt", "width": 64}).json()
        with worker(store_url, tmp_path, app="fastapi_app:tasks", cwd=EXAMPLES):
            done = client.get(f"/thumbnails/{job_id}", params={"wait": 20})
            failed = client.get(f"/thumbnails/{bad['job_id']}", params={"wait": 20})
        assert done.status_code == 200
        assert done.json() == {"job_id": job_id, "state": "completed", "result": {
            "image": "cat.png", "width": 128, "thumbnail": "cat.png@128w"}}
        assert failed.json()["state"] == "archived"
        assert "not an image: notes.txt" in failed.json()["error"]
        assert client.get("/thumbnails/no-such-job").status_code == 404
        assert client.post("/thumbnails", json={"image": "x.png", "width": 0}
                           ).status_code == 422  # FastAPI's validation, nothing enqueued
