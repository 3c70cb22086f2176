"""The shipped schema follows headgate/db/README.md: one migration numbering for both
engines, and PostgreSQL's functions applied from their current text when it changed."""

from __future__ import annotations

import psycopg
import pytest

from headgate import open_store
from headgate.adapters.migrations import function_files, has_statements, migrations
from headgate.store import SchemaMismatch


def test_every_migration_number_exists_on_both_engines_under_one_name() -> None:
    sqlite = {m.version: m.name for m in migrations("sqlite")}
    postgres = {m.version: m.name for m in migrations("postgres")}
    assert sqlite == postgres


def test_numbered_migrations_define_no_server_functions() -> None:
    for migration in migrations("postgres"):
        assert "CREATE FUNCTION" not in migration.sql.upper(), migration.name
        assert "CREATE OR REPLACE FUNCTION" not in migration.sql.upper(), migration.name


def test_a_comment_only_migration_has_no_statements() -> None:
    assert not has_statements("-- nothing on this engine\n\n-- really\n")
    assert has_statements("-- why\nDROP INDEX IF EXISTS x;\n")




def test_migrate_applies_a_function_file_whose_text_changed(store_url: str) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only")
    open_store(store_url).close()
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute("DROP FUNCTION headgate_widen(ANYARRAY, INTEGER) CASCADE")
        conn.execute("UPDATE schema_functions SET sha256 = 'older' WHERE name = 'enqueue.sql'")
    with pytest.raises(SchemaMismatch, match="enqueue.sql"):
        open_store(store_url, migrate=False)
    store = open_store(store_url)
    try:
        store.close()
        with psycopg.connect(store_url, autocommit=True) as conn:
            digests = dict(conn.execute("SELECT name, sha256 FROM schema_functions"))
            assert conn.execute("SELECT headgate_widen(ARRAY[1], 2)").fetchone()[0] == [1, 1]
        assert digests == {f.name: f.digest for f in function_files("postgres")}
    finally:
        store.close()


def test_an_unchanged_function_file_is_not_applied_again(store_url: str) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only")
    open_store(store_url).close()
    with psycopg.connect(store_url, autocommit=True) as conn:
        before = dict(conn.execute("SELECT name, applied_at_ms FROM schema_functions"))
    open_store(store_url).close()
    with psycopg.connect(store_url, autocommit=True) as conn:
        after = dict(conn.execute("SELECT name, applied_at_ms FROM schema_functions"))
    assert after == before and len(before) == len(function_files("postgres"))
