"""Every `headgate` command on a store it cannot use: one `headgate: error: store
unavailable: …` line and exit code 69, never a traceback — real processes, real files.
And start-up migrations: on by default, off with `--no-migrate` or `HG_MIGRATE=0`, in
which case a schema behind the code is refused naming `headgate migrate`."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from support import headgate_cmd

import headgate
from headgate.adapters.migrations import migrations
from headgate.adapters.sqlite.connection import _split_sql

TESTS_DIR = Path(__file__).resolve().parents[1]
EXIT_STORE_UNAVAILABLE = 69
TIMEOUT_S = 30
UNREACHABLE_PG = "postgresql://x@127.0.0.1:1/x"


def known_versions() -> set[int]:
    return {m.version for m in migrations("sqlite")}


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    full_env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), full_env.get("PYTHONPATH", "")])
    full_env["HG_TEST_DIR"] = str(tmp_path)
    full_env.update(env or {})
    return subprocess.run([*headgate_cmd(), *args], env=full_env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def command(name: str, url: str, port: int) -> list[str]:
    """`name` pointed at the store `url` (sqlite:///PATH for demo, which takes a file)."""
    if name == "migrate":
        return ["migrate", "--store", url]
    if name == "worker":
        return ["worker", "--app", "worker_app:make_worker", "--store", url]
    if name == "serve":
        return ["serve", "--store", url, "--addr", f"127.0.0.1:{port}"]
    return ["demo", "--no-workers", "--db", url.removeprefix("sqlite:///"),
            "--addr", f"127.0.0.1:{port}"]


def assert_refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == EXIT_STORE_UNAVAILABLE, output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("headgate: error: store unavailable: "), output
    for needle in needles:
        assert needle in lines[0], output
    # Refused before gunicorn started: no listening socket, no worker process.
    assert "Traceback" not in output and "gunicorn" not in output, output


def partial_database(path: Path, upto: int) -> None:
    """A file migrated by an older release: migrations up to `upto` applied."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                     "name TEXT NOT NULL, applied_at_ms INTEGER NOT NULL)")
        for migration in migrations("sqlite"):
            if migration.version > upto:
                break
            for statement in _split_sql(migration.sql):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)",
                         (migration.version, migration.name))
    conn.close()


def applied(path: Path) -> set[int]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
    finally:
        conn.close()


@pytest.mark.parametrize(("name", "port"), [("migrate", 0), ("worker", 0), ("serve", 18971),
                                            ("demo", 18972)])
def test_a_file_that_is_not_a_database_is_one_line_and_exit_69(
        tmp_path: Path, name: str, port: int) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not an SQLite file, just some bytes\n" * 4)
    assert_refused(run(tmp_path, *command(name, f"sqlite:///{garbage}", port)),
                   "file is not a database")


@pytest.mark.parametrize(("name", "port"), [("migrate", 0), ("worker", 0), ("serve", 18973)])
def test_an_unreachable_postgres_is_one_line_and_exit_69(
        tmp_path: Path, name: str, port: int) -> None:
    result = run(tmp_path, *command(name, UNREACHABLE_PG, port))
    assert_refused(result, "Connection refused")


def test_an_unreachable_postgres_from_the_environment_too(tmp_path: Path) -> None:
    result = run(tmp_path, "migrate", env={"HG_STORE": "pg", "HG_PG": UNREACHABLE_PG})
    assert_refused(result, "Connection refused")


@pytest.mark.parametrize(("name", "port"), [("migrate", 0), ("worker", 0), ("serve", 18974),
                                            ("demo", 18975)])
def test_a_schema_newer_than_the_code_is_refused_by_every_command(
        tmp_path: Path, name: str, port: int) -> None:
    db = tmp_path / "future.db"
    headgate.open_store(f"sqlite:///{db}").close()
    newer = max(known_versions()) + 1
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (?, '0099_future.sql', 0)",
                     (newer,))
    conn.close()
    result = run(tmp_path, *command(name, f"sqlite:///{db}", port))
    assert_refused(result, f"version {newer}", "newer than this headgate")


@pytest.mark.parametrize(
    ("name", "port", "switch"),
    [("serve", 18976, "flag"), ("serve", 18977, "env"), ("worker", 0, "flag"),
     ("worker", 0, "env")],
)
def test_migrations_off_refuse_a_schema_behind_the_code(
        tmp_path: Path, name: str, port: int, switch: str) -> None:
    db = tmp_path / "old.db"
    partial_database(db, upto=4)
    args = command(name, f"sqlite:///{db}", port)
    env = {}
    if switch == "flag":
        args.append("--no-migrate")
    else:
        env["HG_MIGRATE"] = "0"
    assert_refused(run(tmp_path, *args, env=env), "behind", "headgate migrate")
    assert max(applied(db)) == 4  # not migrated behind the operator's back


def test_migrations_off_refuse_an_empty_database(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    result = run(tmp_path, *command("serve", f"sqlite:///{db}", 18978), "--no-migrate")
    assert_refused(result, "no headgate schema", "headgate migrate")


def test_headgate_migrate_upgrades_an_old_schema_even_with_migrations_off(
        tmp_path: Path) -> None:
    """HG_MIGRATE is about start-up; `headgate migrate` is the explicit step."""
    db = tmp_path / "old.db"
    partial_database(db, upto=4)
    result = run(tmp_path, "migrate", "--store", f"sqlite:///{db}", env={"HG_MIGRATE": "0"})
    assert result.returncode == 0, result.stderr
    assert applied(db) == known_versions()
    assert f"schema version {max(known_versions())}" in result.stdout
