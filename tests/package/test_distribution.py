"""headgate as people install it: a wheel built from this tree, installed non-editable
into a fresh virtualenv with the pinned dependencies of constraints.txt (without the
postgres extra), and run from a directory outside the checkout with the checkout not
importable.

Slow (a wheel build, a venv and a pip install: about half a minute with a warm pip
cache), so marked `slow`; it runs in the suite all the same.
"""

from __future__ import annotations

import email
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
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import headgate

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# What a wheel is built from (sdist-like): everything else in the checkout stays out.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "headgate")
INSTALL_TIMEOUT_S = 600
START_TIMEOUT_S = 60


@dataclass(frozen=True)
class InstalledWheel:
    wheel: Path
    venv: Path
    workdir: Path  # outside the checkout; the processes below run here

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def env(self) -> dict[str, str]:
        """This environment less PYTHONPATH and the HG_ settings (HG_TEST_ too), the
        venv first on PATH."""
        env = {k: v for k, v in os.environ.items()
               if k != "PYTHONPATH" and not k.startswith(("HG_", "VIRTUAL_ENV"))}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(self, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(cmd), cwd=self.workdir, env=self.env(),
                              capture_output=True, text=True, timeout=timeout)

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin("python"), "-c", code)


def _base_python() -> str:
    """The interpreter this venv was made from (a venv of a venv would inherit nothing,
    but its base is the plain python3.11 a user has)."""
    exe = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(exe) if exe.exists() else (shutil.which("python3.11") or sys.executable)


def _check(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        pytest.fail(f"{what} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-3000:]}")


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstalledWheel]:
    base = tmp_path_factory.mktemp("distribution")
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources, and
    # the checkout is shared with other processes.
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    dist = base / "dist"
    _check(subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S), "pip wheel")
    (wheel,) = dist.glob("*.whl")

    venv = base / "venv"
    _check(subprocess.run([_base_python(), "-m", "venv", str(venv)], capture_output=True,
                          text=True, timeout=INSTALL_TIMEOUT_S), "python -m venv")
    _check(subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
         "-c", str(ROOT / "constraints.txt"), str(wheel)],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S), "pip install")
    workdir = base / "work"
    workdir.mkdir()
    yield InstalledWheel(wheel, venv, workdir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_installed_package_is_the_wheel_not_the_checkout(
        installed_wheel: InstalledWheel) -> None:
    proc = installed_wheel.python("import headgate; print(headgate.__file__)")
    _check(proc, "import headgate")
    location = Path(proc.stdout.strip()).resolve()
    assert location.is_relative_to(installed_wheel.venv.resolve()), location
    assert not location.is_relative_to(ROOT)


def test_wheel_migrates_a_new_sqlite_file_and_serves_until_ready(
        installed_wheel: InstalledWheel) -> None:
    db = installed_wheel.workdir / "x.db"
    url = f"sqlite:///{db}"
    proc = installed_wheel.run(installed_wheel.bin("headgate"), "migrate", "--store", url)
    _check(proc, "headgate migrate")
    assert db.exists()
    assert "schema version" in proc.stdout
    newest = max(int(p.name.split("_", 1)[0])
                 for p in (ROOT / "headgate" / "db" / "sqlite").glob("[0-9]*.sql"))
    assert proc.stdout.strip().endswith(f"schema version {newest}"), proc.stdout

    port = _free_port()
    log_path = installed_wheel.workdir / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [installed_wheel.bin("headgate"), "serve", "--addr", f"127.0.0.1:{port}",
             "--store", url],
            cwd=installed_wheel.workdir, env=installed_wheel.env(), stdout=log,
            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        ready: tuple[int, str] | None = None
        while time.monotonic() < deadline:
            if server.poll() is not None:
                pytest.fail(f"serve exited {server.returncode}:\n{log_path.read_text()}")
            try:
                ready = _get(f"http://127.0.0.1:{port}/readyz")
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                ready = None
            if ready and ready[0] == 200:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"no 200 from /readyz within {START_TIMEOUT_S}s (last {ready}):\n"
                        f"{log_path.read_text()}")
        os.kill(server.pid, signal.SIGTERM)
        assert server.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_wheel_runs_a_worker_on_jobs_a_producer_enqueued(
        installed_wheel: InstalledWheel) -> None:
    # The library (open_store, Client) and `headgate worker --app` from the wheel.
    work = installed_wheel.workdir
    url = f"sqlite:///{work / 'worker.db'}"
    done = work / "done.txt"
    (work / "wheelapp.py").write_text(
        "from pathlib import Path\n"
        "import headgate\n\n"
        "def make(store):\n"
        "    worker = headgate.Worker(store, queues=['default'], concurrency=1)\n\n"
        "    @worker.handler('touch')\n"
        "    def touch(job, ctx):\n"
        "        Path(job.payload.decode()).write_text(job.id)\n\n"
        "    return worker\n")
    proc = installed_wheel.python(
        "import headgate\n"
        f"store = headgate.open_store({url!r})\n"
        f"print(headgate.Client(store).enqueue('touch', {str(done).encode()!r}))\n"
        "store.close()\n")
    _check(proc, "enqueue")
    job_id = proc.stdout.strip()
    log_path = work / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [installed_wheel.bin("headgate"), "worker", "--app", "wheelapp:make",
             "--store", url], cwd=work, env=installed_wheel.env(), stdout=log,
            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not done.exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"job not done (worker rc {worker.poll()}):\n"
                            f"{log_path.read_text()}")
            time.sleep(0.1)
        assert done.read_text() == job_id
        os.kill(worker.pid, signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_postgres_url_without_the_extra_is_one_error_line_naming_it(
        installed_wheel: InstalledWheel) -> None:
    proc = installed_wheel.run(installed_wheel.bin("headgate"), "migrate", "--store",
                               "postgresql://x@127.0.0.1:1/x")
    assert proc.returncode == 69, proc.stderr  # EX_UNAVAILABLE, as for any unusable store
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("headgate: error: store unavailable: PostgreSQL support")
    assert "pip install 'headgate-queue[postgres]'" in lines[0]
    assert "Traceback" not in proc.stderr

    # The library: one typed error (a StoreUnavailable) that names the extra.
    proc = installed_wheel.python(
        "import headgate\n"
        "try:\n"
        "    headgate.open_store('postgresql://x@127.0.0.1:1/x')\n"
        "except headgate.MissingExtra as exc:\n"
        "    print(exc.extra, isinstance(exc, headgate.StoreUnavailable))\n")
    _check(proc, "open_store")
    assert proc.stdout.split() == ["postgres", "True"]


def test_an_install_missing_its_migrations_is_one_error_line(
        installed_wheel: InstalledWheel) -> None:
    # A broken or stripped install: the schema resource is gone.
    proc = installed_wheel.python("import headgate, pathlib; "
                                  "print(pathlib.Path(headgate.__file__).parent)")
    _check(proc, "import headgate")
    sqlite_dir = Path(proc.stdout.strip()) / "db" / "sqlite"
    aside = sqlite_dir.with_name("sqlite.aside")
    sqlite_dir.rename(aside)
    try:
        proc = installed_wheel.run(installed_wheel.bin("headgate"), "migrate", "--store",
                                   f"sqlite:///{installed_wheel.workdir / 'nomig.db'}")
    finally:
        aside.rename(sqlite_dir)
    assert proc.returncode == 69, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("headgate: error: store unavailable: cannot read headgate's "
                               "sqlite migrations"), lines[0]


def test_import_headgate_from_the_wheel_loads_no_server_or_scheduler(
        installed_wheel: InstalledWheel) -> None:
    proc = installed_wheel.python(
        "import json, sys, headgate\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n")
    _check(proc, "import headgate")
    loaded = set(json.loads(proc.stdout))
    assert "headgate" in loaded
    assert loaded.isdisjoint({"flask", "gunicorn", "apscheduler", "psycopg"}), loaded


def test_the_distribution_is_headgate_queue_the_import_and_command_headgate(
        installed_wheel: InstalledWheel) -> None:
    # "headgate" on the package index is an unrelated project: installing by that name
    # would bring a stranger's code.
    assert installed_wheel.wheel.name.startswith(f"headgate_queue-{headgate.__version__}-")
    with zipfile.ZipFile(installed_wheel.wheel) as wheel:
        (meta_name,) = (n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(wheel.read(meta_name))
    assert meta["Name"] == "headgate-queue"
    extras = set(meta.get_all("Provides-Extra") or [])
    assert {"postgres", "django", "otel", "fastapi"} <= extras, extras
    proc = installed_wheel.python(
        "import importlib.metadata as m, headgate\n"
        "print(m.version('headgate-queue') == headgate.__version__)\n"
        "print(m.packages_distributions()['headgate'])\n")
    _check(proc, "importlib.metadata")
    assert proc.stdout.split("\n")[:2] == ["True", "['headgate-queue']"], proc.stdout


def test_an_installed_wheel_offers_no_bench_command(installed_wheel: InstalledWheel) -> None:
    # The benchmarks are scripts of the checkout's bench/, which a wheel does not ship.
    proc = installed_wheel.run(installed_wheel.bin("headgate"), "--help")
    _check(proc, "headgate --help")
    commands = {line.split()[0] for line in
                proc.stdout.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert {"serve", "worker", "migrate", "demo"} <= commands, proc.stdout
    assert "bench" not in commands, proc.stdout
    proc = installed_wheel.run(installed_wheel.bin("headgate"), "bench", "engine")
    assert proc.returncode == 2, proc.stderr
    assert "No such command 'bench'" in proc.stderr, proc.stderr


def test_wheel_carries_schema_types_and_license_and_one_version(
        installed_wheel: InstalledWheel) -> None:
    with zipfile.ZipFile(installed_wheel.wheel) as wheel:
        names = set(wheel.namelist())
        (meta_name,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(wheel.read(meta_name))
    shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / "headgate" / "db").rglob("*.sql")}
    assert shipped and shipped <= names, sorted(shipped - names)
    assert "headgate/py.typed" in names
    assert "headgate/__main__.py" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)

    assert meta["License-Expression"] == "MIT"
    assert meta["Version"] == headgate.__version__
    requires = meta.get_all("Requires-Dist") or []
    pinned = [r for r in requires if "==" in r.partition(";")[0]]
    assert not pinned, pinned  # ranges a host application can live with, not pins
    psycopg = [r for r in requires if r.startswith("psycopg")]
    assert psycopg and all('extra == "postgres"' in r for r in psycopg), psycopg
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Changelog", "Issues"} <= set(urls)

    # The console script, `python -m headgate`, the module and the metadata agree.
    expected = f"headgate, version {meta['Version']}"
    cli = installed_wheel.run(installed_wheel.bin("headgate"), "--version")
    assert (cli.returncode, cli.stdout.strip()) == (0, expected), cli.stderr
    module = installed_wheel.run(installed_wheel.bin("python"), "-m", "headgate", "--version")
    assert (module.returncode, module.stdout.strip()) == (0, expected), module.stderr
    attr = installed_wheel.python("import headgate; print(headgate.__version__)")
    assert attr.stdout.strip() == meta["Version"]


def test_the_library_runs_from_the_zipped_wheel(installed_wheel: InstalledWheel) -> None:
    # A wheel is a zip file that zipimport can import from: no file of the package
    # exists on disk, so every resource (migrations, named SQL, the transition table)
    # must be read through importlib.resources.
    proc = installed_wheel.python(
        "import sys\n"
        f"sys.path.insert(0, {str(installed_wheel.wheel)!r})\n"
        "import headgate\n"
        "from headgate import Outcome, State\n"
        f"assert headgate.__file__.startswith({str(installed_wheel.wheel)!r}), headgate.__file__\n"
        f"store = headgate.open_store('sqlite:///{installed_wheel.workdir / 'zipped.db'}')\n"
        "job_id = headgate.Client(store).enqueue('touch', b'x')\n"
        "(claim,) = store.admit('w', ['default'], 1, 30_000)\n"
        "store.ack(claim, Outcome.SUCCESS)\n"
        "print(claim.job.id == job_id, store.get_job(job_id).state is State.COMPLETED)\n"
        "store.close()\n")
    _check(proc, "the library from the zipped wheel")
    assert proc.stdout.split() == ["True", "True"]
