"""The README's Quickstart, run as written: its `tasks.py` and `test_tasks.py` blocks
saved in an empty directory, its worker command as a real process there, its Python
session as a doctest, its pytest test under pytest, and its `curl` against its
`headgate serve` (on a free port instead of 8080). Nothing names a store: every process
opens the default, `headgate.db` in that directory."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import headgate_cmd

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = (ROOT / "README.md").read_text().split("## Quickstart\n", 1)[1] \
    .split("\n## ", 1)[0]
START_TIMEOUT_S = 60


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", QUICKSTART, re.S)


def _file_block(name: str) -> str:
    (block,) = [b for b in _blocks("python") if b.startswith(f"# {name}")]
    return block


def _sh_block(containing: str) -> str:
    (block,) = [b for b in _blocks("sh") if containing in b]
    return block


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("HG_") and k != "PYTHONPATH"}


def _command(block: str) -> list[str]:
    """A one-line `headgate …` block as an argv (the installed command)."""
    (line,) = [ln for ln in block.splitlines() if ln.startswith("headgate ")]
    return [*headgate_cmd(), *line.split("#", 1)[0].split()[1:]]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The directory with the README's files and its worker running there."""
    work = tmp_path_factory.mktemp("quickstart")
    (work / "tasks.py").write_text(_file_block("tasks.py"))
    (work / "test_tasks.py").write_text(_file_block("test_tasks.py"))
    log = work / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(_command(_sh_block("headgate worker")), cwd=work,
                                  env=_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        yield work
        assert worker.poll() is None, log.read_text()
    finally:
        _stop(worker)


def test_the_task_file_is_about_ten_lines_and_names_no_store() -> None:
    code = _file_block("tasks.py")
    assert len([ln for ln in code.splitlines() if ln.strip()]) <= 10, code
    assert "headgate.App()" in code
    assert "sqlite:" not in code and "postgresql:" not in code


def test_the_python_session_gets_the_workers_result(quickstart: Path) -> None:
    (session,) = _blocks("pycon")
    (quickstart / "session.txt").write_text(session)
    proc = subprocess.run([sys.executable, "-m", "doctest", "session.txt"], cwd=quickstart,
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + (quickstart / "worker.log").read_text()
    assert (quickstart / "headgate.db").exists()


def test_the_pytest_test_passes_without_a_worker(quickstart: Path) -> None:
    # As in a new user's venv: pytest alone, none of this suite's plugins.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_tasks.py"], cwd=quickstart,
                          env={**_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_curl_enqueue_runs_through_serve_and_the_worker(quickstart: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = quickstart / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen([*_command(_sh_block("headgate serve")), "--addr",
                                   f"127.0.0.1:{port}"], cwd=quickstart, env=_env(),
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert server.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"{base}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        script = _sh_block("curl").replace("http://127.0.0.1:8080", base)
        assert base in script
        first = subprocess.run(["bash", "-euc", script], cwd=quickstart, env=_env(),
                               capture_output=True, text=True, timeout=60)
        again = subprocess.run(["bash", "-euc", script], cwd=quickstart, env=_env(),
                               capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr
        job_id = json.loads(first.stdout)["id"]
        # The same Idempotency-Key answers the same job.
        assert json.loads(again.stdout)["id"] == job_id
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/v1/jobs/{job_id}/result",
                                            timeout=5) as resp:
                    result = json.loads(resp.read())
                break
            except urllib.error.HTTPError as exc:
                assert exc.code == 404, exc
            assert time.monotonic() < deadline, (quickstart / "worker.log").read_text()
            time.sleep(0.1)
    finally:
        _stop(server)
    assert json.loads(base64.b64decode(result["bytes"])) == 5
    assert f'"bytes": "{result["bytes"]}"' in QUICKSTART  # what the README says it shows
