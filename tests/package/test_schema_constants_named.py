"""The numbers the SQL needs are written once, in headgate/core/schema_constants.py (and
the latency bounds in core/latency.py), and reach the database only through what
`headgate migrate` generates from them: the SQL names them, it never retypes them.

Checked on the text a database runs that is still being written: PostgreSQL's function
files, the migrations from 0016 on (older ones are history and stay as they ran) and the
SQL strings of the adapters; and in Python, that no module computes a history bucket
from a literal or defines one of these constants again."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from headgate.adapters.migrations import constants_file, function_files, migrations
from headgate.core import schema_constants
from headgate.core.schema_constants import (
    HISTORY_BUCKET_MS,
    KEY_LOCK_SEED,
    MAX_ERRORS_KEPT,
    QUEUE_LOCK_SEED,
    SQL_CONSTANTS,
)

PACKAGE = Path(__file__).resolve().parents[2] / "headgate"
FIRST_NAMED = 16  # migration 0016 moved the triggers onto the generated tables
SQL_WORDS = re.compile(r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|CREATE)\b")
# SQLite's clock (ms since the epoch from a Julian day) is a formula, not a policy.
SQLITE_CLOCK = re.compile(r"\(julianday\('now'\) - 2440587\.5\) \* 86400000")
# Retyped, still to be wired by the engineer who owns the file (being changed as this
# test was written): remove an entry with its fix; the test fails on a stale one.
PENDING: set[tuple[str, str]] = set()


def _literal(value: int) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.]){value}(?![\w.])")


# What retyping each constant looks like. A value of three digits or more is
# recognisable anywhere; a small one only where it is used (a lock seed, a LIMIT).
RULES: dict[str, re.Pattern[str]] = {
    name: _literal(value) for name, value in SQL_CONSTANTS.items() if value >= 100
}
RULES["queue_lock_seed"] = re.compile(
    rf"hashtextextended\((?:[^()]|\([^()]*\))*,\s*{QUEUE_LOCK_SEED}\s*\)")
RULES["key_lock_seed"] = re.compile(
    rf"hashtextextended\((?:[^()]|\([^()]*\))*,\s*{KEY_LOCK_SEED}\s*\)")
RULES["max_errors_kept"] = re.compile(rf"\bLIMIT\s+{MAX_ERRORS_KEPT}\b", re.IGNORECASE)
# A ladder of bounds: `WHEN v <= 250 THEN 250`.
RULES["latency_bounds"] = re.compile(r"<=\s*(\d+)\s+THEN\s+\1\b", re.IGNORECASE)


def retyped(sql: str) -> set[str]:
    """The constants `sql` spells out instead of naming."""
    text = SQLITE_CLOCK.sub("", re.sub(r"--[^\n]*", "", sql))
    return {name for name, rule in RULES.items() if rule.search(text)}


def _sql_strings(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and SQL_WORDS.search(node.value):
            yield node.value


def _python_findings() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in sorted((PACKAGE / "adapters").rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        for sql in _sql_strings(path):
            found |= {(where, name) for name in retyped(sql)}
    public = {n for n in vars(schema_constants) if n.isupper()}
    own = PACKAGE / "core" / "schema_constants.py"
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == own:
            continue
        where = str(path.relative_to(PACKAGE))
        tree = ast.parse(path.read_text())
        for node in tree.body:  # a module-level constant of the same name, from a literal
            if isinstance(node, ast.Assign) \
                    and not isinstance(node.value, ast.Name | ast.Attribute):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id in public:
                        found.add((where, target.id))
        for node in ast.walk(tree):  # `now % 60_000`, `now // 60_000`: a bucket by hand
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.FloorDiv)
                    and isinstance(node.right, ast.Constant)
                    and node.right.value == HISTORY_BUCKET_MS):
                found.add((where, "history_bucket_ms"))
    return found


def test_the_rules_recognise_what_the_sql_used_to_retype() -> None:
    old_trigger = (PACKAGE / "db" / "sqlite" / "0014_queue_latency.sql").read_text()
    assert {"history_bucket_ms", "latency_bounds"} <= retyped(old_trigger)
    assert retyped("SELECT pg_advisory_xact_lock(hashtextextended(%(queue)s::text, 7))") \
        == {"queue_lock_seed"}
    assert retyped("SELECT pg_advisory_xact_lock(hashtextextended(encode(k, 'hex'), 11))") \
        == {"key_lock_seed"}
    assert retyped("SELECT coalesce(x, 86400000), y - y % 60000 FROM t") \
        == {"default_retention_ms", "history_bucket_ms"}
    assert retyped("ORDER BY i DESC LIMIT 25") == {"max_errors_kept"}
    assert retyped("SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)") \
        == set()
    assert retyped("SELECT t - t % headgate_history_bucket_ms() -- was 60000") == set()


def test_function_files_name_the_constants() -> None:
    shipped = [f for f in function_files("postgres") if f.name != constants_file().name]
    assert shipped, "no function files found"
    assert {f.name: retyped(f.sql) for f in shipped if retyped(f.sql)} == {}


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_migrations_from_0016_name_the_constants(engine: str) -> None:
    newer = [m for m in migrations(engine) if m.version >= FIRST_NAMED]
    assert newer
    assert {m.name: retyped(m.sql) for m in newer if retyped(m.sql)} == {}


def test_the_ladder_and_the_bucket_are_gone_from_the_sqlite_triggers_in_use() -> None:
    # 0016 recreates every trigger 0014 made (and 0012's last_error one).
    latest = next(m for m in migrations("sqlite") if m.version == FIRST_NAMED).sql
    for trigger in ("jobs_latency_wait", "jobs_latency_run", "jobs_latency_run_deleted",
                    "jobs_last_error"):
        assert f"DROP TRIGGER {trigger};" in latest
        assert f"CREATE TRIGGER {trigger} " in latest


def test_python_takes_the_constants_from_core() -> None:
    found = _python_findings()
    assert found - PENDING == set()
    stale = PENDING - found
    assert not stale, f"fixed, remove from PENDING: {sorted(stale)}"


def test_the_generated_source_holds_every_constant() -> None:
    text = constants_file().sql
    for name, value in SQL_CONSTANTS.items():
        assert f"FUNCTION headgate_{name}() RETURNS bigint" in text
        assert f"SELECT {value}::bigint" in text
    assert "FUNCTION headgate_latency_bound(v bigint)" in text
