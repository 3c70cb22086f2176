"""`headgate serve --workers N --app tasks_app:app`: the server's in-process worker runs
an App's tasks on the server's store, after upserting the app's declared schedules."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import tasks_app
from support import headgate_cmd, wait_for

import headgate

TESTS_DIR = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def test_serve_with_workers_runs_an_apps_tasks(tmp_path: Path, monkeypatch) -> None:
    db = tmp_path / "serve.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env.update(HG_STORE="sqlite", HG_SQLITE=str(db), HG_TEST_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")]))
    port = _free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*headgate_cmd(), "serve", "--addr", f"127.0.0.1:{port}", "--workers", "2",
             "--app", "tasks_app:app", "--drain-ms", "300"],
            env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    store = None
    try:
        wait_for(lambda: proc.poll() is not None or _ready(f"http://127.0.0.1:{port}/readyz"),
                 30, "serve to be ready")
        assert proc.poll() is None, log_path.read_text()
        store = headgate.open_store(f"sqlite:///{db}")
        monkeypatch.setenv("HG_TEST_DIR", str(tmp_path))
        tasks_app.app.use_store(store)
        assert tasks_app.add.enqueue(20, 22).result(timeout=30) == 42, log_path.read_text()
        assert store.get_schedule("tasks-heartbeat") is not None
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        if store is not None:
            store.close()
    assert code == 0, log_path.read_text()
