"""An http(s):// App enqueues through a server and has no store of its own: its worker
gets one from --store or HG_STORE/HG_SQLITE/HG_PG, and without either it is refused with
one clear error, not left draining a fresh SQLite file in the working directory that
nothing enqueues to (which it did)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support import headgate_cmd

import headgate
from headgate.services.config import ConfigError

SERVER = "http://127.0.0.1:9"  # never contacted: no enqueue happens here
MODULE = f'''
import headgate

app = headgate.App("{SERVER}")


@app.task(queue="relay")
def add(a: int, b: int) -> int:
    return a + b
'''


@pytest.fixture
def no_store_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("HG_STORE", "HG_SQLITE", "HG_PG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_worker_of_an_http_app_needs_a_store_named(no_store_env: Path) -> None:
    app = headgate.App(SERVER)
    for build in (app.worker, app.build_worker, lambda: app.store):
        with pytest.raises(ConfigError, match=r"has no store of its own; give its worker "
                                              r"one \(--store URL, HG_STORE"):
            build()
    assert list(no_store_env.iterdir()) == []  # no SQLite file was created


def test_a_worker_of_an_http_app_works_the_store_it_is_given(
        no_store_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = headgate.App(SERVER)

    @app.task(queue="relay")
    def add(a: int, b: int) -> int:
        return a + b

    given = no_store_env / "given.db"
    worker = app.build_worker(f"sqlite:///{given}")
    try:
        assert worker.store is app.store and given.exists()
        assert worker.queues == ["relay"]
    finally:
        app.close()
    monkeypatch.setenv("HG_SQLITE", str(no_store_env / "env.db"))
    other = headgate.App(SERVER)
    try:
        other.store.enqueue_many([headgate.Envelope(kind="k", queue="relay")])
        assert (no_store_env / "env.db").exists()
        assert [j.queue for j in other.store.list_jobs(headgate.JobFilter()).jobs] == ["relay"]
    finally:
        other.close()
    assert not (no_store_env / "headgate.db").exists()


def test_headgate_worker_of_an_http_app_without_a_store_is_one_error_line(
        tmp_path: Path) -> None:
    (tmp_path / "relay_app.py").write_text(MODULE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    proc = subprocess.run([*headgate_cmd(), "worker", "--app", "relay_app:app"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"headgate: error: App('{SERVER}') enqueues through that server and has no store "
        "of its own; give its worker one (--store URL, HG_STORE, HG_SQLITE or HG_PG)"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == \
        ["relay_app.py"]
