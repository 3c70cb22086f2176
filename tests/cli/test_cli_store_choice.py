"""No silent wrong store: a worker's and serve's first log line names the store it opened
(its password hidden) and where that came from; an App made with a store of its own
refuses a command whose --store or HG_* names another database (one `headgate: error:`
line naming both, exit 2), runs on its own when they name the same one, and `App()`
takes the command's store. Real `headgate` processes, real files, the real PostgreSQL
server."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest
from integration_support import free_port
from support import headgate_cmd, pg_available, wait_for

import headgate
from headgate.services.config import ConfigError

APPS = '''
import headgate

own = headgate.App("sqlite:///own.db")
plain = headgate.App()


@own.task(name="choice.own")
def from_own(x: int) -> int:
    return x + 1


@plain.task(name="choice.plain")
def from_plain(x: int) -> int:
    return x * 2
'''


def _env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env.update(extra)
    return env


def run(cwd: Path, *args: str, env: Mapping[str, str] = {}
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*headgate_cmd(), *args], cwd=cwd, env=_env(env),
                          capture_output=True, text=True, timeout=60)


@contextmanager
def started(cwd: Path, *args: str, ready: str, env: Mapping[str, str] = {}
            ) -> Iterator[Path]:
    """A `headgate` process until its stderr shows `ready`; yields that stderr file."""
    err = cwd / f"stderr-{time.monotonic_ns()}.log"
    with err.open("wb") as out:
        proc = subprocess.Popen([*headgate_cmd(), *args], cwd=cwd, env=_env(env),
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: ready in err.read_text() or proc.poll() is not None, 30, ready)
        assert proc.poll() is None, err.read_text()
        yield err
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def first_line(err: Path) -> str:
    return err.read_text().splitlines()[0]


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headgate: error: "), output
    assert "Traceback" not in output
    return lines[0]


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    (tmp_path / "choice_apps.py").write_text(APPS)
    return tmp_path


def test_the_worker_names_its_store_first(cwd: Path) -> None:
    with started(cwd, "worker", "--app", "choice_apps:plain", "--store", "sqlite:///w.db",
                 ready=" starting: ") as err:
        assert " INFO headgate.worker: worker store: " \
            f"sqlite:///{cwd}/w.db (from --store)" in first_line(err), err.read_text()
    with started(cwd, "worker", "--app", "choice_apps:plain", ready=" starting: ",
                 env={"HG_STORE": "sqlite:///env.db"}) as err:
        assert first_line(err).endswith(f"worker store: sqlite:///{cwd}/env.db "
                                        "(from $HG_STORE)"), err.read_text()
    with started(cwd, "worker", "--app", "choice_apps:own", ready=" starting: ") as err:
        assert first_line(err).endswith(f"worker store: sqlite:///{cwd}/own.db "
                                        "(from the App's URL)"), err.read_text()


def test_serve_names_its_store_first(cwd: Path) -> None:
    port = free_port()
    with started(cwd, "serve", "--addr", f"127.0.0.1:{port}", ready="Listening at") as err:
        assert first_line(err).endswith(
            f"INFO headgate.server: serve store: sqlite:///{cwd}/headgate.db (from the "
            "default: no --store, HG_STORE, HG_SQLITE, HG_PG)"), err.read_text()
    port = free_port()
    with started(cwd, "serve", "--addr", f"127.0.0.1:{port}", "--log-format", "json",
                 ready="Listening at", env={"HG_SQLITE": "s.db"}) as err:
        assert '"message": "serve store: sqlite:///' + f'{cwd}/s.db (from $HG_SQLITE)"' \
            in first_line(err), err.read_text()


@pytest.mark.skipif(not pg_available(), reason="needs HG_TEST_PG")
def test_a_password_never_reaches_the_log(cwd: Path, pg_url: str) -> None:
    with_password = pg_url.replace("://headgate@", "://headgate:secret@", 1)
    with started(cwd, "worker", "--app", "choice_apps:plain", ready=" starting: ",
                 env={"HG_STORE": with_password}) as err:
        line = first_line(err)
    assert "worker store: postgresql://headgate:***@127.0.0.1" in line, line
    assert "secret" not in err.read_text()
    port = free_port()
    with started(cwd, "serve", "--addr", f"127.0.0.1:{port}", "--store", with_password,
                 ready="Listening at") as err:
        line = first_line(err)
    assert "serve store: postgresql://headgate:***@127.0.0.1" in line, line
    assert "secret" not in err.read_text()


def test_a_worker_refuses_a_store_other_than_the_apps_own(cwd: Path) -> None:
    line = refusal(run(cwd, "worker", "--app", "choice_apps:own", "--store",
                       "sqlite:///other.db"))
    assert line == (
        f"headgate: error: the command's store sqlite:///{cwd}/other.db (from --store) is "
        f"not the app's own sqlite:///{cwd}/own.db (from App('sqlite:///own.db')): name "
        "one database, or make the app App() to take the command's store")
    line = refusal(run(cwd, "worker", "--app", "choice_apps:own",
                       env={"HG_STORE": "postgresql://u:secret@db.invalid/jobs"}))
    assert "postgresql://u:***@db.invalid/jobs (from $HG_STORE)" in line, line
    assert "secret" not in line and f"sqlite:///{cwd}/own.db" in line
    assert sorted(p.name for p in cwd.iterdir() if p.suffix == ".db") == []  # nothing opened


def test_serve_refuses_an_in_process_app_with_another_store(cwd: Path) -> None:
    # No --store: serve's default file is not the app's.
    line = refusal(run(cwd, "serve", "--addr", "127.0.0.1:1", "--workers", "1",
                       "--app", "choice_apps:own"))
    assert f"store sqlite:///{cwd}/headgate.db (from the default: no --store" in line, line
    assert f"the app's own sqlite:///{cwd}/own.db" in line, line
    line = refusal(run(cwd, "serve", "--addr", "127.0.0.1:1", "--workers", "1",
                       "--app", "choice_apps:own", env={"HG_STORE": "sqlite:///b.db"}))
    assert f"sqlite:///{cwd}/b.db (from $HG_STORE)" in line, line


def test_the_same_file_written_differently_is_no_conflict(cwd: Path) -> None:
    ref_id = headgate_app(cwd, "own").tasks["choice.own"].enqueue(1).id
    with started(cwd, "worker", "--app", "choice_apps:own", "--store",
                 f"sqlite:///{cwd}/own.db", ready=" starting: "):
        assert headgate_app(cwd, "own").ref(ref_id).result(timeout=30) == 2


def test_app_without_a_url_takes_the_commands_store(cwd: Path) -> None:
    store = headgate.open_store(f"sqlite:///{cwd}/given.db")
    try:
        job_id = headgate.Client(store).enqueue(
            "choice.plain", headgate.JsonCodec().encode_args((21,), {}))
        with started(cwd, "worker", "--app", "choice_apps:plain", "--store",
                     "sqlite:///given.db", ready=" starting: "):
            assert headgate.App(store=store).ref(job_id).result(timeout=30) == 42
    finally:
        store.close()
    assert not (cwd / "headgate.db").exists()


def headgate_app(cwd: Path, name: str) -> headgate.App:
    """An App like choice_apps' `name`, for the test process (URLs made absolute)."""
    app = headgate.App(f"sqlite:///{cwd}/own.db") if name == "own" else headgate.App()

    @app.task(name="choice.own")
    def from_own(x: int) -> int:
        return x + 1

    return app


def test_the_library_applies_the_same_rule(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("HG_STORE", "HG_SQLITE", "HG_PG"):
        monkeypatch.delenv(name, raising=False)
    own = headgate.App("sqlite:///own.db")
    assert own.command_settings().store_url() == "sqlite:///own.db"
    assert own.command_settings(f"sqlite:///{tmp_path}/own.db").store_url() == \
        "sqlite:///own.db"
    with pytest.raises(ConfigError, match=r"store sqlite:///.*/b\.db \(from --store\) is "
                                          r"not the app's own"):
        own.build_worker("sqlite:///b.db")
    with pytest.raises(ConfigError, match="--store: 'sqlite://b.db' is not a SQLite URL: "
                                          "sqlite:///relative/path.db"):
        own.command_settings("sqlite://b.db")  # malformed: the rule, not a conflict
    monkeypatch.setenv("HG_SQLITE", "env.db")
    with pytest.raises(ConfigError, match=r"\(from \$HG_SQLITE\)"):
        own.command_settings()
    plain = headgate.App()
    assert plain.command_settings().store_url() == "sqlite:///env.db"
    assert plain.command_settings("sqlite:///flag.db").store_url() == "sqlite:///flag.db"
    # An App given an open store has that store's database as its own.
    store = headgate.open_store("sqlite:///given.db")
    try:
        given = headgate.App(store=store)
        assert given.own_store_url() == "sqlite:///given.db"
        with pytest.raises(ConfigError, match=r"\(from App\(store=\.\.\.\)\)"):
            given.command_settings("sqlite:///else.db")
    finally:
        store.close()
    assert not (tmp_path / "b.db").exists() and not (tmp_path / "else.db").exists()
