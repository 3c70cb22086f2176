"""Each SQL statement is written once: no migration or function file repeats another's
statement on the same engine (a function's text lives only in functions/), and no two
Python modules spell out the same statement (one names it, the other imports it).
Statements shorter than a line are left alone: `COMMIT` or a one-column probe is not
worth a name."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "headgate"
MIN_CHARS = 80  # about one line of SQL
SQL_WORDS = re.compile(r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|CREATE)\b")


def _normal(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip().rstrip(";").strip()


def _repeated(places: dict[str, set[str]]) -> list[str]:
    return [f"{sorted(where)}: {text[:120]}" for text, where in places.items()
            if len(where) > 1]


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_no_schema_file_repeats_another_files_statement(engine: str) -> None:
    folder = PACKAGE / "db" / engine
    places: dict[str, set[str]] = defaultdict(set)
    # schema.sql, generated, repeats every statement by design; the trigger files take
    # over definitions from the migrations that first wrote them.
    for path in [*sorted(folder.glob("[0-9]*.sql")), *sorted(folder.glob("functions/*.sql"))]:
        text = re.sub(r"--[^\n]*", "", path.read_text())
        for statement in re.split(r";\s*\n", text):
            normal = _normal(statement)
            if len(normal) >= MIN_CHARS:
                places[normal].add(path.name)
    assert not _repeated(places)


def test_no_two_modules_spell_out_the_same_statement() -> None:
    places: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and SQL_WORDS.search(node.value)):
                normal = _normal(node.value)
                if len(normal) >= MIN_CHARS:
                    places[normal].add(str(path.relative_to(PACKAGE)))
    assert not _repeated(places)


def test_the_postgres_store_clock_is_written_once() -> None:
    """The clock in milliseconds is headgate_now_ms() everywhere but its own file: two
    spellings drift (one rounded while SQLite's truncated). The numbered migrations are
    history and stay as they were written."""
    clock = re.compile(r"epoch\s+from\s+clock_timestamp\(\)\s*\)", re.IGNORECASE)
    files = [*(PACKAGE / "db" / "postgres" / "functions").glob("*.sql"),
             *(PACKAGE / "adapters").rglob("*.sql"), *PACKAGE.rglob("*.py")]
    found = sorted(str(p.relative_to(PACKAGE)) for p in files if clock.search(p.read_text()))
    assert found == ["db/postgres/functions/clock.sql"]
