"""`headgate serve` as an operator runs it: a real process, a real socket, a real signal."""

from __future__ import annotations

import http.client
import json
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


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_serve_answers_healthz_and_stops_cleanly_with_a_console_open(
    tmp_path: Path, stop: signal.Signals,
) -> None:
    """A stop signal ends the open console page's live socket ("going away", which the
    page answers by reconnecting) and the open event stream (a clean end, not a cut),
    instead of leaving them to gunicorn's graceful timeout and its kill."""
    from simple_websocket import Client as WsClient
    from simple_websocket import ConnectionClosed

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
        ws = WsClient.connect(f"ws://127.0.0.1:{port}/live")
        ws.send(json.dumps({"topics": ["cluster"], "query": ""}))
        assert ws.receive(timeout=10)  # the socket is served (the topic is sent every tick)
        events = http.client.HTTPConnection("127.0.0.1", port, timeout=STOP_TIMEOUT_S)
        events.request("GET", "/api/v1/events")
        stream = events.getresponse()
        assert stream.readline() == b": connected\n"

        proc.send_signal(stop)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.receive(timeout=STOP_TIMEOUT_S)
        assert (closed.value.reason, closed.value.message) == (1001, "server stopping")
        # The stream's chunked body ends properly (a cut raises IncompleteRead).
        stream.read()
        events.close()
        try:
            rc = proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve ignored {stop.name} for {STOP_TIMEOUT_S}s:\n"
                        f"{log_path.read_text()}")
        assert rc == 0, log_path.read_text()
        assert "SIGKILL" not in log_path.read_text()
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

    port = _free_port()  # not a fixed one: another test process may hold it
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
        # Past the store's 5 s busy timeout, several duty intervals, and until a lease
        # claim has timed out: on a loaded box the first claims may start seconds late.
        claim_failed = LOG_LINE + r"duty \w+: claim failed"
        held_from = time.monotonic()
        while time.monotonic() - held_from < 30:  # the assertion below says if it never did
            if time.monotonic() - held_from >= 7 and re.search(claim_failed, log_path.read_text()):
                break
            time.sleep(0.1)
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
    assert re.search(claim_failed, text), text
    assert "skipped: maximum number of running instances" not in text, text


def test_serve_with_workers_runs_jobs_in_process_and_drains_on_sigterm(
    tmp_path: Path,
) -> None:
    """`--workers N` runs a worker pool in the server process. Jobs posted to
    the API get done; SIGTERM releases what still runs, uncharged, and exits 0."""
    import json

    import headgate

    tests_dir = Path(__file__).resolve().parents[1]
    port = _free_port()
    env = _env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(tests_dir), env.get("PYTHONPATH", "")])
    env["HG_TEST_DIR"] = str(tmp_path)
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*_headgate_cmd(), "serve", "--addr", f"127.0.0.1:{port}", "--workers", "2",
             "--app", "worker_app:make_worker", "--drain-ms", "300"],
            env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}/api/v1"

    def post_job(kind: str, key: str) -> str:
        req = urllib.request.Request(
            f"{base}/jobs", data=json.dumps({"kind": kind, "payload": ""}).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": key},
            method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())["id"]

    store = headgate.open_store(f"sqlite:///{tmp_path / 'serve.db'}")
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"serve exited {proc.returncode}:\n{log_path.read_text()}")
            try:
                _get(f"http://127.0.0.1:{port}/readyz")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    pytest.fail(f"not ready:\n{log_path.read_text()}")
                time.sleep(0.1)
        done = [post_job("ok", f"ok-{i}") for i in range(5)]
        blocked = post_job("block", "block-1")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
            all(store.get_job(j).state is headgate.State.COMPLETED for j in done)
            and (tmp_path / f"{blocked}.started").exists()
        ):
            time.sleep(0.05)
        assert all(store.get_job(j).state is headgate.State.COMPLETED for j in done), \
            log_path.read_text()
        assert (tmp_path / f"{blocked}.started").exists(), log_path.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S + 5) == 0, log_path.read_text()
        job = store.get_job(blocked)
        assert job.state is headgate.State.AVAILABLE, log_path.read_text()
        assert (job.attempt, job.crash_attempt) == (0, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
        store.close()


@pytest.mark.parametrize("args, message", [
    (["--workers", "2"], "--workers needs --app"),
    (["--app", "worker_app:make_worker"], "--app needs --workers"),
    (["--workers", "1", "--app", "worker_app:no_such"], "no_such"),
    (["--workers", "1", "--app", "tasks_app:add"], "tasks_app:add is a task, not an app"),
])
def test_serve_refuses_a_worker_pool_it_cannot_build(
    tmp_path: Path, args: list[str], message: str
) -> None:
    env = _env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [*_headgate_cmd(), "serve", "--addr", f"127.0.0.1:{_free_port()}", *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def test_headgate_bench_runs_a_benchmark_of_the_checkout(tmp_path: Path) -> None:
    """In a checkout, `headgate bench` runs bench/NAME.py, whose last line is JSON."""
    import json

    result = subprocess.run(
        [*_headgate_cmd(), "bench", "engine", "--metric", "single_enqueue",
         "--variant", "plain", "--n", "200", "--runs", "1"],
        env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    line = json.loads(result.stdout.strip().splitlines()[-1])
    assert (line["metric"], line["n"], line["runs"]) == ("single_enqueue", 200, 1)
    assert line["median"] > 0
    refused = subprocess.run([*_headgate_cmd(), "bench", "nope"], env=_env(tmp_path),
                             cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "nope" in refused.stderr
