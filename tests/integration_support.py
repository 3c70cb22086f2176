"""Real `headgate serve` and `headgate worker` processes for the integration tests
started on a test's store with tests/ as the working directory, so
`--app integrations_app:app` imports the module the test process imports too."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from support import headgate_cmd

TESTS_DIR = Path(__file__).resolve().parent
START_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env.update(extra)
    return env


def _stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextmanager
def serve(store_url: str, tmp_path: Path, *, workers: int = 0,
          env: Mapping[str, str] | None = None) -> Iterator[str]:
    """A `headgate serve` on a free port; yields its base URL."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    cmd = [*headgate_cmd(), "serve", "--addr", f"127.0.0.1:{port}", "--store", store_url,
           "--drain-ms", "2000"]
    if workers:
        cmd += ["--workers", str(workers), "--app", "integrations_app:app"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=TESTS_DIR, env=_env(env or {}), stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited {proc.returncode}:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"serve did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield url
    finally:
        _stop(proc, log)


@contextmanager
def worker(store_url: str, tmp_path: Path, *args: str, app: str = "integrations_app:app",
           env: Mapping[str, str] | None = None, cwd: Path = TESTS_DIR,
           ) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A `headgate worker --app APP --store URL ARGS...`; yields it and its stderr file."""
    err = tmp_path / f"worker-{time.monotonic_ns()}.err"
    cmd = [*headgate_cmd(), "worker", "--app", app, "--store", store_url, "--drain-ms",
           "2000", *args]
    with err.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=_env(env or {}),
                                stdout=subprocess.DEVNULL, stderr=out)
    try:
        yield proc, err
    finally:
        _stop(proc, err)
