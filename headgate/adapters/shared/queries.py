"""Named SQL: each adapter module's statements live in one file, `sql/<module>.sql` in
its folder, read once when the module is imported.

A file is a run of blocks, each a name line, optional comment lines saying why, then
the statement up to the next name line:

    -- name: select_job_state
    -- The row an operator action checks before it changes it.
    SELECT state, queue FROM jobs WHERE id = ?{for_update}

Full-line comments are documentation and are dropped from the text (a `?` in one would
be taken for a placeholder); a duplicate name, an empty statement or SQL before the
first name refuses to load, and asking for a name the file lacks is a KeyError naming
the file, so a typo fails at import, not on the first call.

Text whose shape varies at run time stays a template: `{field}` placeholders set from
code, never from input (the fields are reviewed in tests/package/test_sql_home.py).
`fill` sets some of them (a constant column list at import, a WHERE clause built from
literal columns), leaving the rest; `str.format` sets all of them at call time.

Read through `importlib.resources`, as the migrations are, so an installed wheel finds
the files as a checkout does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import cache
from importlib.resources import files

NAME_LINE = re.compile(r"--\s*name:\s*(?P<name>\S*)\s*$")
NAME = re.compile(r"[a-z][a-z0-9_]*")


class QueryFileError(ValueError):
    """A .sql file of named statements that does not parse."""


class Queries(Mapping[str, str]):
    """The statements of one file by name (read-only)."""

    def __init__(self, where: str, statements: dict[str, str]) -> None:
        self.where = where
        self._statements = statements

    def __getitem__(self, name: str) -> str:
        try:
            return self._statements[name]
        except KeyError:
            raise KeyError(f"{self.where} has no statement named {name!r}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._statements)

    def __len__(self) -> int:
        return len(self._statements)

    def __repr__(self) -> str:
        return f"Queries({self.where!r}, {len(self)} statements)"


def parse(text: str, where: str = "<string>") -> dict[str, str]:
    """`text`'s statements by name, in file order."""
    statements: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []

    def close() -> None:
        if name is None:
            return
        body = "\n".join(lines).strip("\n")
        if not body.strip():
            raise QueryFileError(f"{where}: statement {name!r} is empty")
        statements[name] = body

    for number, line in enumerate(text.splitlines(), 1):
        found = NAME_LINE.match(line.strip())
        if found:
            close()
            name, lines = found["name"], []
            if not NAME.fullmatch(name):
                raise QueryFileError(f"{where}:{number}: {name!r} is not a statement name "
                                     "(lower case, digits and underscores)")
            if name in statements:
                raise QueryFileError(f"{where}:{number}: {name!r} is named twice")
        elif line.strip().startswith("--"):
            continue
        elif name is None:
            if line.strip():
                raise QueryFileError(f"{where}:{number}: SQL before the first `-- name:`")
        else:
            lines.append(line.rstrip())
    close()
    if not statements:
        raise QueryFileError(f"{where}: no named statements")
    return statements


@cache
def load(module: str) -> Queries:
    """The statements of `module` (a dotted module name, usually `__name__`): the file
    `sql/<last part>.sql` in the module's package."""
    package, _, stem = module.rpartition(".")
    where = f"{package.replace('.', '/')}/sql/{stem}.sql"
    text = files(package).joinpath("sql", f"{stem}.sql").read_text(encoding="utf-8")
    return Queries(where, parse(text, where))


def fill(template: str, **parts: str) -> str:
    """`template` with the named `{field}` placeholders set, any others left as they are
    (for a later `fill` or `str.format`). A part the template does not have is an error."""
    for field, text in parts.items():
        mark = "{" + field + "}"
        if mark not in template:
            raise KeyError(f"no {mark} in the template {template[:60]!r}")
        template = template.replace(mark, text)
    return template
