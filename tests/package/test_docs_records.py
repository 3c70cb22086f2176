"""Docs and comments are records of what holds now, not a journal. docs/PERFORMANCE.md
keeps the method, the current table and the open misses in a page a reader finishes;
what earlier runs found goes to CHANGELOG.md and git history. A code comment states its
reason, and a figure that depends on which VM ran it on which day belongs on that page,
where the next run replaces it: a comment naming "machine C" or a date goes stale
unseen."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PERFORMANCE = ROOT / "docs" / "PERFORMANCE.md"
MAX_PERFORMANCE_LINES = 260

# Why each pattern marks a dated or machine-bound figure in a comment.
STALE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bmachines? [A-Z]\b"), "a machine letter"),
    (re.compile(r"\b(19|20)\d\d-[01]\d-[0-3]\d\b"), "an ISO date"),
    (re.compile(r"\d\s*(jobs|req|requests)/s\b"), "a throughput figure"),
]


def python_comments(source: str) -> list[tuple[int, str]]:
    """Every `#` comment and every module, class and function docstring, by line."""
    found = [(tok.start[0], tok.string)
             for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                first = body[0].lineno
                found += [(first + i, line)
                          for i, line in enumerate(body[0].value.value.splitlines())]
    return found


def sql_comments(source: str) -> list[tuple[int, str]]:
    """`--` line comments and `/* … */` blocks, by line."""
    found: list[tuple[int, str]] = []
    for match in re.finditer(r"--[^\n]*|/\*.*?\*/", source, re.DOTALL):
        first = source.count("\n", 0, match.start()) + 1
        found += [(first + i, line) for i, line in enumerate(match.group().splitlines())]
    return found


def shell_comments(source: str) -> list[tuple[int, str]]:
    """Lines that are a comment (`#` or Lua's `--`) from their first non-blank character."""
    return [(n, line) for n, line in enumerate(source.splitlines(), 1)
            if line.lstrip().startswith(("#", "--"))]


def comments(path: Path) -> list[tuple[int, str]]:
    source = path.read_text()
    if path.suffix == ".py":
        return python_comments(source)
    if path.suffix == ".sql":
        return sql_comments(source)
    return shell_comments(source)


def stale(lines: list[tuple[int, str]]) -> list[tuple[int, str, str]]:
    return [(n, why, line.strip()) for n, line in lines
            for pattern, why in STALE if pattern.search(line)]


def sources() -> list[Path]:
    package = [p for p in (ROOT / "headgate").rglob("*")
               if p.suffix in {".py", ".sql"} and "__pycache__" not in p.parts]
    bench = [p for p in (ROOT / "bench").iterdir()
             if p.suffix in {".py", ".sh", ".lua"}]
    return sorted(package + bench)


def test_performance_page_is_a_record_not_a_journal() -> None:
    text = PERFORMANCE.read_text()
    lines = text.splitlines()
    assert len(lines) <= MAX_PERFORMANCE_LINES, (
        f"docs/PERFORMANCE.md has {len(lines)} lines (at most {MAX_PERFORMANCE_LINES}): "
        "move history to CHANGELOG.md (Performance history)")
    # The page names its machine in one line, not by the letters the journal used, and
    # cites no request tracker: it is read without either.
    assert re.findall(r"\bmachines? [A-Z]\b", text) == []
    assert re.findall(r"\b[Ii]ssue \d+", text) == []
    for section in ("## Method", "## Current figures", "## Physical limits", "## Open misses"):
        assert section in lines


def test_code_comments_carry_no_machine_letters_dates_or_dated_figures() -> None:
    paths = sources()
    scanned = {p: comments(p) for p in paths}
    # The walk reached the code: the adapters' SQL and the package's docstrings are there.
    assert any(p.suffix == ".sql" and found for p, found in scanned.items())
    assert sum(len(found) for found in scanned.values()) > 1000
    hits = [f"{p.relative_to(ROOT)}:{n}: {why}: {line}"
            for p, found in scanned.items() for n, why, line in stale(found)]
    assert hits == [], ("state the reason here and the figure in docs/PERFORMANCE.md:\n"
                        + "\n".join(hits))


def test_the_scan_finds_what_it_is_meant_to_refuse() -> None:
    python = (
        '"""Faster by a quarter (machine C)."""\n'
        "x = '2026-12-04'  # a value, not a comment\n"
        "def f() -> None:\n"
        '    """Measured 2026-12-04."""\n'
        "    # 1,313 jobs/s on the old VM\n"
    )
    assert [(n, why) for n, why, _ in stale(python_comments(python))] == [
        (5, "a throughput figure"), (1, "a machine letter"), (4, "an ISO date")]
    sql = "SELECT 1; -- 2,000 req/s\n/* measured on\n   machine D */\nSELECT '2026-01-01';\n"
    assert [(n, why) for n, why, _ in stale(sql_comments(sql))] == [
        (1, "a throughput figure"), (3, "a machine letter")]
    shell = 'echo "$(date -u +%F)"\n# machine F, 2026-12-04\n'
    assert [(n, why) for n, why, _ in stale(shell_comments(shell))] == [
        (2, "a machine letter"), (2, "an ISO date")]
