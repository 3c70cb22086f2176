"""`headgate serve` as an operator runs it: a real process, a real socket, a real signal."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 15


def _headgate_cmd() -> list[str]:
    # Prefer the installed console script: that is what serve.sh runs.
    script = Path(sys.executable).with_name("headgate")
    if script.exists():
        return [str(script)]
    found = shutil.which("headgate")
    return [found] if found else [sys.executable, "-m", "headgate.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["HG_STORE"] = "sqlite"
    env["HG_SQLITE"] = str(tmp_path / "serve.db")
    return env


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status, resp.read().decode()


def test_serve_answers_healthz_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*_headgate_cmd(), "serve", "--addr", f"127.0.0.1:{port}"],
            env=_env(tmp_path),
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        status, body = 0, ""
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"serve exited {proc.returncode}:\n{log_path.read_text()}")
            try:
                status, body = _get(f"http://127.0.0.1:{port}/healthz")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        else:
            pytest.fail(f"no /healthz within {START_TIMEOUT_S}s:\n{log_path.read_text()}")
        assert (status, body) == (200, "ok")
        assert _get(f"http://127.0.0.1:{port}/api/v1/healthz") == (200, "ok")

        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve ignored SIGTERM for {STOP_TIMEOUT_S}s:\n{log_path.read_text()}")
        assert rc == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_serve_refuses_non_loopback_without_auth(tmp_path: Path, command: str) -> None:
    port = _free_port()
    result = subprocess.run(
        [*_headgate_cmd(), command, "--addr", f"0.0.0.0:{port}"],
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=STOP_TIMEOUT_S,
    )
    assert result.returncode == 2, result.stderr
    assert "refusing to listen on 0.0.0.0" in result.stderr
    assert "HG_API_TOKENS" in result.stderr
    assert "HG_API_ALLOW_REMOTE=1" in result.stderr
    # Refused before touching a store.
    assert not list(tmp_path.glob("*.db")), list(tmp_path.iterdir())


LOG_LINE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING) headgate\.duties: "


def test_serve_logs_headgate_lines_with_time_and_level_and_no_apscheduler_flood(
        tmp_path: Path) -> None:
    """A duty blocked behind another process's write lock outlives its 1 s interval:
    APScheduler would then warn "Execution of job … skipped" on every tick."""
    import re
    import sqlite3

    port = 18981
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*_headgate_cmd(), "serve", "--addr", f"127.0.0.1:{port}"],
            env=_env(tmp_path), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "duties:" not in log_path.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"serve logged no duties line:\n{log_path.read_text()}")
            time.sleep(0.1)
        blocker = sqlite3.connect(tmp_path / "serve.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        time.sleep(7)  # past the store's 5 s busy timeout, several duty intervals
        blocker.execute("COMMIT")
        blocker.close()
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert re.search(LOG_LINE + r"duties: \S+ started", text), text
    assert re.search(LOG_LINE + r"duty \w+: claim failed", text), text
    assert "skipped: maximum number of running instances" not in text, text
