"""headgate/db/<engine>/schema.sql is today's schema: migrating an empty database on
each engine gives exactly the file, so a migration or trigger file changed without
regenerating it fails here, naming the command that does."""

from __future__ import annotations

import importlib.util
import sqlite3
from contextlib import closing
from pathlib import Path
from types import ModuleType

import pytest
from support import pg_available

from headgate import open_store


def _script() -> ModuleType:
    """scripts/schema.py, the contributors' command (not a module of the package)."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "schema.py"
    spec = importlib.util.spec_from_file_location("headgate_schema_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
REGENERATE = SCRIPT.REGENERATE
schema_file = SCRIPT.schema_file
sqlite_schema = SCRIPT.sqlite_schema
postgres_schema = SCRIPT.postgres_schema


def _stale(engine: str) -> str:
    return f"headgate/db/{engine}/schema.sql is not what migrating makes: run {REGENERATE}"


def test_sqlite_schema_file_is_what_migrating_an_empty_database_makes(tmp_path: Path) -> None:
    db = tmp_path / "hg.db"
    open_store(f"sqlite:///{db}").close()
    with closing(sqlite3.connect(db)) as conn:
        dumped = sqlite_schema(conn)
    assert dumped == schema_file("sqlite").read_text(encoding="utf-8"), _stale("sqlite")


@pytest.mark.skipif(not pg_available(), reason="PostgreSQL not configured (HG_TEST_PG)")
def test_postgres_schema_file_is_what_migrating_an_empty_database_makes(pg_url: str) -> None:
    import psycopg

    open_store(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        dumped = postgres_schema(conn)
    assert dumped == schema_file("postgres").read_text(encoding="utf-8"), _stale("postgres")


def test_the_command_checks_the_sqlite_file_without_writing_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    before = schema_file("sqlite").stat().st_mtime_ns
    assert SCRIPT.main(["--engine", "sqlite", "--check"]) == 0, capsys.readouterr().out
    assert capsys.readouterr().out == "headgate/db/sqlite/schema.sql: current\n"
    assert schema_file("sqlite").stat().st_mtime_ns == before


def test_the_sqlite_dump_lays_out_what_alter_table_appended() -> None:
    # sqlite_master keeps `…\n, added INTEGER)` after ADD COLUMN; the file keeps one a line.
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute("CREATE TABLE \"t\" (\n  a TEXT   PRIMARY KEY, -- why, (really)\n"
                     "  b TEXT DEFAULT 'x  ,  y'\n) WITHOUT ROWID")
        conn.execute("ALTER TABLE t ADD COLUMN c INTEGER NOT NULL DEFAULT 0")
        conn.execute("CREATE INDEX t_b ON t (b)\n    WHERE b <> ''")
        dumped = sqlite_schema(conn)
    assert dumped.split("\n\n", 1)[1] == (
        "CREATE TABLE t (\n"
        "    a TEXT PRIMARY KEY,\n"
        "    b TEXT DEFAULT 'x  ,  y',\n"
        "    c INTEGER NOT NULL DEFAULT 0\n"
        ") WITHOUT ROWID;\n"
        "CREATE INDEX t_b ON t (b) WHERE b <> '';\n")
