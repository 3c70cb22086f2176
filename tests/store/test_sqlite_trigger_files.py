"""SQLite's triggers live in headgate/db/sqlite/triggers/*.sql, their current text, and
`headgate migrate` makes the database hold exactly that: a file whose digest
schema_triggers does not record, or whose trigger the database holds in another text
(edited by hand, or gone), is dropped and recreated; an unchanged database is not
written. The files are the whole story: every trigger a migrated database has is one
of theirs, and schema.sql shows each."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

import headgate
from headgate import open_store
from headgate.adapters.migrations import migrations, trigger_files, write_sqlite_constants
from headgate.adapters.sqlite.connection import _split_sql, trigger_definitions
from headgate.store import SchemaMismatch

HAND_MADE = ("CREATE TRIGGER jobs_last_error AFTER UPDATE OF errors ON jobs BEGIN\n"
             "    UPDATE jobs SET last_error = 'by hand' WHERE rowid = new.rowid;\nEND")


@contextmanager
def raw(db: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        yield conn


def defined() -> dict[str, str]:
    """Every trigger of every file, by name (a name defined twice fails the count)."""
    found: dict[str, str] = {}
    for file in trigger_files():
        found.update(trigger_definitions(file))
    assert len(found) == sum(len(trigger_definitions(f)) for f in trigger_files())
    return found


def in_use(db: Path) -> dict[str, str]:
    with raw(db) as conn:
        return dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"))


def ledger(db: Path) -> dict[str, tuple[str, int]]:
    with raw(db) as conn:
        return {n: (d, at) for n, d, at in conn.execute("SELECT * FROM schema_triggers")}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "hg.db"
    open_store(f"sqlite:///{path}").close()
    return path


def test_a_migrated_database_holds_exactly_the_files_triggers(db: Path) -> None:
    assert in_use(db) == defined()
    assert {n: d for n, (d, _) in ledger(db).items()} == {
        f.name: f.digest for f in trigger_files()}


def test_schema_sql_shows_every_trigger_as_its_file_writes_it() -> None:
    shown = (Path(__file__).resolve().parents[2] / "headgate" / "db" / "sqlite"
             / "schema.sql").read_text(encoding="utf-8")
    for name, text in defined().items():
        assert text + ";" in shown, name


@pytest.mark.parametrize("change", ["edited", "dropped"])
def test_a_trigger_changed_by_hand_gets_its_files_text_back_on_open(
        db: Path, change: str) -> None:
    url = f"sqlite:///{db}"
    before = ledger(db)
    with raw(db) as conn:
        conn.execute("DROP TRIGGER jobs_last_error")
        if change == "edited":
            conn.execute(HAND_MADE)
    # Without migrating the store refuses to run on triggers that are not its own.
    with pytest.raises(SchemaMismatch, match=r"last_error\.sql"):
        open_store(url, migrate=False)
    store = open_store(url)
    try:
        assert in_use(db) == defined()
        after = ledger(db)
        assert after["last_error.sql"][1] >= before["last_error.sql"][1]
        assert {n: v for n, v in after.items() if n != "last_error.sql"} == {
            n: v for n, v in before.items() if n != "last_error.sql"}
        # And it is the file's trigger that runs: the last error's first line.
        job = headgate.Client(store).enqueue("k", b"{}", queue="q")
        with raw(db) as conn:
            conn.execute("UPDATE jobs SET errors = ? WHERE id = ?",
                         ('[{"error": "Boom: first\\nsecond"}]', job))
            assert conn.execute("SELECT last_error FROM jobs WHERE id = ?",
                                (job,)).fetchone() == ("Boom: first",)
    finally:
        store.close()


def test_a_recorded_digest_that_differs_reapplies_the_file(db: Path) -> None:
    url = f"sqlite:///{db}"
    with raw(db) as conn:
        conn.execute("UPDATE schema_triggers SET sha256 = 'older', applied_at_ms = 0 "
                     "WHERE name = 'latency.sql'")
    # The triggers themselves are the file's: a store opened without migrating runs.
    open_store(url, migrate=False).close()
    assert ledger(db)["latency.sql"] == ("older", 0)
    open_store(url).close()
    digest, applied_at = ledger(db)["latency.sql"]
    latency = next(f for f in trigger_files() if f.name == "latency.sql")
    assert (digest, applied_at > 0) == (latency.digest, True)
    assert in_use(db) == defined()


def test_an_unchanged_database_is_not_written_on_open(db: Path) -> None:
    before = ledger(db)
    with raw(db) as conn:
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        open_store(f"sqlite:///{db}").close()
        assert conn.execute("PRAGMA data_version").fetchone()[0] == version
    assert ledger(db) == before


def test_a_database_the_migrations_alone_made_takes_the_files_over_unchanged(
        tmp_path: Path) -> None:
    """A file migrated before the trigger files existed: its triggers are already the
    files' text (the files took over the latest migrations' definitions), so a store
    opened without migrating runs on it, and migrating records the digests."""
    db = tmp_path / "older.db"
    with raw(db) as conn:
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                     "name TEXT NOT NULL, applied_at_ms INTEGER NOT NULL)")
        for migration in migrations("sqlite"):
            conn.execute("BEGIN")
            for statement in _split_sql(migration.sql):
                conn.execute(statement)
            write_sqlite_constants(conn)
            conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)",
                         (migration.version, migration.name))
            conn.execute("COMMIT")
    assert in_use(db) == defined()
    open_store(f"sqlite:///{db}", migrate=False).close()
    open_store(f"sqlite:///{db}").close()
    assert {n: d for n, (d, _) in ledger(db).items()} == {
        f.name: f.digest for f in trigger_files()}


def test_a_trigger_file_holds_only_create_trigger_statements() -> None:
    for file in trigger_files():
        statements = _split_sql(file.sql)
        assert len(statements) == len(trigger_definitions(file)), file.name
        assert all("DROP" not in s.upper().split("BEGIN")[0] for s in statements), file.name

