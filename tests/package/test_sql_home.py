"""The adapters' SQL has one home: each module's statements are named blocks of a `.sql`
file in the `sql/` folder beside it (headgate/adapters/shared/queries.py reads them once,
at import), so a reader finds every statement by name.

Checked here: no function body under headgate/adapters spells a statement out; every
file loads, and every name it defines is used by its module (no dead statements); a
template's placeholders are only the reviewed ones below, each set from code, never
from input; and what the older checks held the Python strings to (written once, the
schema constants named) holds in the files too."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_schema_constants_named import retyped

from headgate.adapters.shared.queries import QueryFileError, fill, load, parse

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ROOT / "headgate" / "adapters"
STATEMENT = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|DROP|ALTER|PRAGMA|LISTEN|NOTIFY|COPY)\b")
MIN_CHARS = 80  # as test_sql_written_once: about one line of SQL

# Modules whose function bodies may hold SQL, and why. An entry that no longer matches
# anything fails the test: remove it with the change that made it so.
ALLOWED = {
    "headgate/adapters/sqlite/dialect.py":
        "the dialect's fragments of the shared SQL (tag_test), not statements",
}
# Left out of the check while another change to them is in flight (not stale-checked:
# nothing need be inline in them meanwhile).
PENDING: dict[str, str] = {}

# The placeholders a statement may hold, what code sets each to, and why that is safe.
# Besides these, a placeholder may name another statement of the same file (composed
# at import, e.g. idempotency's purge_and_lock).
FIELDS = {
    "marks": "',' / ', ' joins of '?' repeated len(values) times: placeholders only",
    "name_order": "the connection's dialect: binary_order('name'), the column by code point",
    "written": "',' join of '?' repeated len(values) times (lifecycle._lock_classes): "
               "placeholders only",
    "rows": "joins of '(?, ?, ?)' or enqueue.ROW_MARKS rows: placeholders only",
    "for_update": "the connection's dialect: '' or ' FOR UPDATE'",
    "skip_locked": "the connection's dialect: '' or ' FOR UPDATE SKIP LOCKED'",
    "waiting": "the connection's dialect: 'waiting > 0' or 'has_waiting AND waiting > 0'",
    "in_queues": "'' or ' AND queue IN (?, …)': placeholders only",
    "columns": "a constant column list of the module (rows.JOB_COLUMNS…, adaptive.COLUMNS, "
               "audit.COLUMNS, operations.OP_COLUMNS, periodic.SCHEDULE_COLUMNS)",
    "column": "one of paused, weight, max_unfinished_jobs (control.SET_QUEUE, at import)",
    "where": "clauses built from literal column names, the dialect's tests and '?' only "
             "(job_pages._where, operations._where, audit.page, latency.totals_since)",
    "assignments": "', '.join(f'{column} = ?') over a dict whose keys are literals",
    "states": "quoted State enum values (code constants, at import)",
    "value": "an int() of the store's configuration, in a PRAGMA (no placeholders there)",
    "name": "a literal identifier: a key of SQL_CONSTANTS, or a trigger name a shipped "
            "trigger file defines",
    "ladder": "WHEN lines of ints from core/latency.LATENCY_BOUNDS_MS",
    "inf": "the +Inf bucket's int()",
    "one_args": "postgres/enqueue.ONE_ARGS, the constant arguments of one job: "
                "placeholders only",
    "channel": "notify.CHANNEL or FINISHED_CHANNEL, constant names (LISTEN takes no "
               "parameter)",
    "max_scan": "str() of admission_limits.MAX_SCAN_PER_PARTITION, a code constant",
    "scan_extra": "str() of admission_limits.SCAN_BATCH_EXTRA, a code constant",
    "promote_limit": "str() of admission_limits.PROMOTE_PER_ADMIT, a code constant",
}


def looks_like_sql(text: str) -> bool:
    return bool(STATEMENT.match(text)) or (" FROM " in text and "SELECT" in text)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            found.add(id(node.body[0].value))
    return found


def inline_sql(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string literal or f-string inside a function body that
    looks like SQL; an f-string's fields read as `{}`."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found: dict[int, tuple[int, str]] = {}
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        for node in ast.walk(func):
            if id(node) in skip or id(node) in found:
                continue
            if isinstance(node, ast.JoinedStr):
                skip.update(id(v) for v in node.values)
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}"
                               for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            if looks_like_sql(text):
                found[id(node)] = (node.lineno, text)
    return sorted(found.values())


def _modules() -> list[Path]:
    return sorted(ADAPTERS.rglob("*.py"))


def _sql_files() -> list[Path]:
    return sorted(ADAPTERS.rglob("sql/*.sql"))


def _owner(sql_file: Path) -> Path:
    return sql_file.parent.parent / f"{sql_file.stem}.py"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_detector_finds_an_inline_statement() -> None:
    source = (
        'NAMED = "SELECT 1 FROM t"\n'  # module level: a named constant, not inline
        "def f(conn, cols):\n"
        '    """Select the rows; update the rest."""\n'
        '    conn.execute("SELECT a FROM t WHERE id = ?")\n'
        '    conn.execute(f"UPDATE t SET {cols} = ?")\n'
        '    conn.execute("pragma is lower case, and this is prose")\n'
        '    g = lambda: "  WITH x AS (SELECT 1) SELECT * FROM x"\n'
        '    return "the count" + " FROM SELECT" + "Delete a row"\n'
    )
    assert [line for line, _ in inline_sql(source)] == [4, 5, 7, 8]
    assert inline_sql(source)[1] == (5, "UPDATE t SET {} = ?")


def test_no_function_body_under_adapters_spells_out_a_statement() -> None:
    modules = _modules()
    assert len(modules) > 30
    found = {_rel(p): inline_sql(p.read_text()) for p in modules}
    inline = [f"{path}:{line}: {' '.join(text.split())[:80]}"
              for path, hits in found.items() if path not in ALLOWED | PENDING
              for line, text in hits]
    assert inline == [], "name these in the module's sql/ file:\n" + "\n".join(inline)
    stale = sorted(path for path in ALLOWED if not found.get(path))
    assert stale == [], f"nothing inline any more, remove from ALLOWED: {stale}"


def _used_keys(tree: ast.AST) -> set[str]:
    """The statements a module asks its file for: `Q["name"]` (Q = load(__name__))."""
    return {node.slice.value for node in ast.walk(tree)
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and node.value.id == "Q" and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)}


def _names_read_anywhere() -> set[str]:
    read: set[str] = set()
    for path in (ROOT / "headgate").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                read.add(node.id)
            elif isinstance(node, ast.Attribute):
                read.add(node.attr)
            elif isinstance(node, ast.alias):
                read.add(node.name)
    return read


def test_every_sql_file_loads_and_every_statement_is_used() -> None:
    files = _sql_files()
    assert len(files) > 20
    read = _names_read_anywhere()
    dead: list[str] = []
    for sql_file in files:
        owner = _owner(sql_file)
        assert owner.is_file(), f"{_rel(sql_file)} has no module {owner.name} beside sql/"
        statements = load(_module_name(owner))
        assert statements.where == _rel(sql_file)
        tree = ast.parse(owner.read_text())
        used = _used_keys(tree)
        dead += [f"{_rel(sql_file)}: {name} (never asked for)"
                 for name in statements if name not in used]
        for node in tree.body:  # a statement bound to a module name nobody reads
            if isinstance(node, ast.Assign) and _used_keys(node.value) & set(statements):
                dead += [f"{_rel(owner)}: {target.id} (bound, never read)"
                         for target in node.targets
                         if isinstance(target, ast.Name) and target.id not in read]
    assert dead == []


def _statements() -> Iterator[tuple[str, str, str, set[str]]]:
    for sql_file in _sql_files():
        statements = parse(sql_file.read_text(), _rel(sql_file))
        for name, text in statements.items():
            yield _rel(sql_file), name, text, set(statements)


def test_placeholders_are_the_reviewed_fields() -> None:
    unreviewed = []
    for where, name, text, names in _statements():
        fields = re.findall(r"\{([^{}]*)\}", text)
        if text.count("{") != len(fields) or text.count("}") != len(fields):
            unreviewed.append(f"{where}: {name}: a brace that is not a placeholder")
        unreviewed += [f"{where}: {name}: {{{field}}}" for field in fields
                       if field not in FIELDS and field not in names - {name}]
    assert unreviewed == [], ("set from code and reviewed into FIELDS with why it is safe, "
                              "or bound as a parameter", unreviewed)


def test_no_two_statements_are_the_same() -> None:
    places: dict[str, set[str]] = defaultdict(set)
    for where, name, text, _ in _statements():
        normal = re.sub(r"\s+", " ", text).strip()
        if len(normal) >= MIN_CHARS:
            places[normal].add(f"{where}: {name}")
    assert [sorted(where) for where in places.values() if len(where) > 1] == []


def test_the_statements_name_the_schema_constants() -> None:
    assert {f"{where}: {name}": sorted(retyped(text))
            for where, name, text, _ in _statements() if retyped(text)} == {}


@pytest.mark.parametrize(("text", "problem"), [
    ("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "named twice"),
    ("-- name: a\n-- only a comment\n\n-- name: b\nSELECT 2\n", "empty"),
    ("SELECT 1\n-- name: a\nSELECT 2\n", "before the first"),
    ("-- name: Bad-Name\nSELECT 1\n", "not a statement name"),
    ("-- just a header\n", "no named statements"),
])
def test_a_file_that_does_not_parse_refuses_to_load(text: str, problem: str) -> None:
    with pytest.raises(QueryFileError, match=problem):
        parse(text, "x.sql")


def test_the_loader_keeps_statements_and_drops_documentation() -> None:
    text = ("-- a header\n\n-- name: one\n-- why it reads what it reads?\n"
            "SELECT a,\n    b\n-- a note inside\nFROM t WHERE id = ?{for_update}\n\n"
            "-- name: two\nDELETE FROM t\n")
    assert parse(text) == {"one": "SELECT a,\n    b\nFROM t WHERE id = ?{for_update}",
                           "two": "DELETE FROM t"}
    statements = load("headgate.adapters.shared.control")
    assert load("headgate.adapters.shared.control") is statements  # read once
    with pytest.raises(KeyError, match="control.sql has no statement named 'nope'"):
        statements["nope"]
    with pytest.raises(TypeError):
        statements["x"] = "SELECT 1"  # type: ignore[index]


def test_fill_sets_the_named_fields_and_leaves_the_rest() -> None:
    template = "SELECT {columns} FROM t WHERE id IN ({marks}){for_update}"
    assert fill(template, columns="a, b") == "SELECT a, b FROM t WHERE id IN ({marks}){for_update}"
    with pytest.raises(KeyError):
        fill(template, colums="a")
