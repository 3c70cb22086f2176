"""SQLite's trigger files are SQL still being written, so the rule of
test_schema_constants_named.py holds for them: they name the numbers of
headgate/core/schema_constants.py (through the schema_constants and latency_bounds
tables), never retype them."""

from __future__ import annotations

from test_schema_constants_named import retyped

from headgate.adapters.migrations import trigger_files


def test_trigger_files_name_the_constants() -> None:
    files = trigger_files()
    assert files, "no trigger files found"
    assert {f.name: retyped(f.sql) for f in files if retyped(f.sql)} == {}
