"""One way to name a store: HG_STORE takes the URLs `--store` and `App(url)` take
(sqlite:///relative.db, sqlite:////absolute.db, postgresql://…), while the older
HG_STORE=sqlite / pg with HG_SQLITE / HG_PG keep working; the help and the error for a
missing directory state the three-slash / four-slash rule. Real `headgate` processes
and real files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support import headgate_cmd, pg_available

import headgate
from headgate.services.config import ConfigError, Settings, same_store

TESTS_DIR = Path(__file__).resolve().parents[1]
RELATIVE_RULE = "sqlite:///relative/path.db"
ABSOLUTE_RULE = "sqlite:////absolute/path.db"


def run(cwd: Path, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    full["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), full.get("PYTHONPATH", "")])
    full.update(env or {})
    return subprocess.run([*headgate_cmd(), *args], env=full, cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headgate: error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]


def test_hg_store_takes_a_relative_sqlite_url(tmp_path: Path) -> None:
    result = run(tmp_path, "migrate", env={"HG_STORE": "sqlite:///rel.db"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("sqlite:///rel.db: schema version ")
    # not headgate.db; rel.db-writer is its writers' lock file (adapters/sqlite/writer_lock.py)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel.db", "rel.db-writer"]


def test_hg_store_takes_an_absolute_sqlite_url(tmp_path: Path) -> None:
    elsewhere = tmp_path / "data"
    elsewhere.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    result = run(cwd, "migrate", env={"HG_STORE": f"sqlite:///{elsewhere}/abs.db"})
    assert result.returncode == 0, result.stderr
    assert f"sqlite:////{str(elsewhere).lstrip('/')}/abs.db" in result.stdout
    assert (elsewhere / "abs.db").is_file() and list(cwd.iterdir()) == []


def test_the_older_values_keep_working(tmp_path: Path) -> None:
    result = run(tmp_path, "migrate",
                 env={"HG_STORE": "sqlite", "HG_SQLITE": str(tmp_path / "old.db")})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "old.db").is_file()
    # HG_SQLITE may be written as a URL too.
    result = run(tmp_path, "migrate", env={"HG_SQLITE": "sqlite:///via_url.db"})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "via_url.db").is_file()


@pytest.mark.skipif(not pg_available(), reason="needs HG_TEST_PG")
def test_hg_store_takes_a_postgresql_url_and_pg_still_works(
        tmp_path: Path, pg_url: str) -> None:
    with_password = pg_url.replace("://headgate@", "://headgate:secret@", 1)
    for env in ({"HG_STORE": with_password}, {"HG_STORE": "pg", "HG_PG": with_password}):
        result = run(tmp_path, "migrate", env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("postgresql://headgate:***@"), result.stdout
        assert "secret" not in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []  # no SQLite file on the side


@pytest.mark.parametrize("value", ["bogus", "sqlite://two-slashes.db", "mysql://x/y",
                                   "sqlite:///"])
def test_a_bad_hg_store_is_one_line_stating_the_forms(tmp_path: Path, value: str) -> None:
    result = run(tmp_path, "migrate", env={"HG_STORE": value})
    assert result.returncode == 2
    line = one_error_line(result)
    assert "HG_STORE" in line and RELATIVE_RULE in line and ABSOLUTE_RULE in line, line
    assert list(tmp_path.iterdir()) == []


def test_a_bad_store_flag_states_the_rule(tmp_path: Path) -> None:
    result = run(tmp_path, "migrate", "--store", "sqlite://x.db")
    assert result.returncode == 2
    line = one_error_line(result)
    assert "--store" in line and "three slashes" in line and "four" in line, line


@pytest.mark.parametrize("command", ["serve", "migrate", "worker"])
def test_the_help_states_the_slash_rule(tmp_path: Path, command: str) -> None:
    result = run(tmp_path, command, "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "sqlite:///relative/path.db (three slashes: relative to the working directory)" \
        in text, text
    assert "sqlite:////absolute/path.db (four: an absolute path)" in text, text
    assert "$HG_STORE (the same URLs" in text, text


@pytest.mark.parametrize("absolute", [False, True])
def test_a_missing_directory_states_the_rule(tmp_path: Path, absolute: bool) -> None:
    url = (f"sqlite:///{tmp_path}/no/such/dir/x.db" if absolute
           else "sqlite:///no/such/dir/x.db")
    result = run(tmp_path, "migrate", "--store", url)
    assert result.returncode == 69
    line = one_error_line(result)
    assert "no/such/dir' does not exist" in line, line
    assert (f"in {str(tmp_path)!r}" in line) is not absolute, line  # the cwd, if relative
    assert "sqlite:///relative/path.db, three slashes, is relative to the working " \
        "directory; sqlite:////absolute/path.db, four, is an absolute path" in line, line
    assert list(tmp_path.iterdir()) == []


def test_settings_read_every_form() -> None:
    def url(env: dict[str, str]) -> str:
        return Settings.from_env(env).store_url()

    assert url({}) == "sqlite:///headgate.db"
    assert url({"HG_STORE": "sqlite:///rel/x.db"}) == "sqlite:///rel/x.db"
    assert url({"HG_STORE": "sqlite:////abs/x.db"}) == "sqlite:////abs/x.db"
    assert url({"HG_STORE": "SQLite:///Case.db"}) == "sqlite:///Case.db"  # path kept
    assert url({"HG_STORE": "postgresql://u@h/db"}) == "postgresql://u@h/db"
    assert url({"HG_STORE": "postgres://u@h/db"}) == "postgres://u@h/db"
    # A URL in HG_STORE is the store; HG_SQLITE / HG_PG only go with sqlite / pg.
    assert url({"HG_STORE": "sqlite:///a.db", "HG_PG": "postgresql://u@h/db"}) == \
        "sqlite:///a.db"
    assert url({"HG_STORE": "PG", "HG_PG": "postgresql://u@h/db"}) == "postgresql://u@h/db"
    assert url({"HG_STORE": "sqlite", "HG_SQLITE": "/abs/y.db"}) == "sqlite:////abs/y.db"
    assert url({"HG_SQLITE": "sqlite:///z.db"}) == "sqlite:///z.db"
    assert Settings.from_env({"HG_STORE": "postgresql://u@h/db"}).store == "pg"
    with pytest.raises(ConfigError, match="HG_STORE=pg needs HG_PG"):
        url({"HG_STORE": "pg"})
    with pytest.raises(ConfigError, match="HG_SQLITE: 'sqlite://z.db' is not a SQLite URL"):
        url({"HG_SQLITE": "sqlite://z.db"})


def test_app_takes_the_same_urls_as_hg_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("HG_STORE", "HG_SQLITE", "HG_PG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HG_STORE", "sqlite:///from_env.db")
    app = headgate.App()  # no URL in code: the environment's
    try:
        app.store.enqueue_many([headgate.Envelope(kind="k")])
        assert (tmp_path / "from_env.db").is_file()
    finally:
        app.close()
    for url, path in (("sqlite:///rel.db", tmp_path / "rel.db"),
                      (f"sqlite:///{tmp_path}/abs.db", tmp_path / "abs.db")):
        app = headgate.App(url)
        try:
            app.store.enqueue_many([headgate.Envelope(kind="k")])
            assert path.is_file()
        finally:
            app.close()
    with pytest.raises(ConfigError, match="three slashes"):
        headgate.App("sqlite://two.db").store  # noqa: B018 - opening is the point
    assert not (tmp_path / "two.db").exists()


def test_urls_naming_one_database_agree(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert same_store("sqlite:///a.db", f"sqlite:///{tmp_path}/a.db")
    assert same_store("sqlite:///real/a.db", "sqlite:///link/a.db")
    assert not same_store("sqlite:///a.db", "sqlite:///b.db")
    assert same_store("postgresql://u:pw@Host/db", "postgres://u@host:5432/db")
    assert same_store("postgresql://u@h/db?application_name=x", "postgresql://u@h/db")
    assert same_store("postgresql:///db?host=h&user=u", "postgresql://u@h/db")
    assert not same_store("postgresql://u@h/db", "postgresql://u@h/other")
    assert not same_store("postgresql://u@h/db", "postgresql://u@h:5433/db")
    assert not same_store("sqlite:///db", "postgresql://u@h/db")
