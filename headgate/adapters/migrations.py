"""The schema shipped inside the package: numbered migrations
(``headgate/db/<engine>/NNNN_*.sql``) and PostgreSQL's server-side functions
(``headgate/db/postgres/functions/*.sql``); ``headgate/db/README.md`` gives the rules.

Read through ``importlib.resources`` so an installed wheel (or a zip) finds them as a
checkout does; nothing here depends on where the package lies on disk.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib.resources import files

from headgate.core import StoreUnavailable


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations(engine: str) -> list[Migration]:
    """The numbered migrations for ``engine`` ("sqlite" or "postgres"), in order."""
    try:
        folder = files("headgate").joinpath("db", engine)
        entries = [e for e in folder.iterdir() if e.name.endswith(".sql") and e.name[:1].isdigit()]
        found = [
            Migration(int(e.name.split("_", 1)[0]), e.name, e.read_text(encoding="utf-8"))
            for e in entries
        ]
    except (OSError, ValueError) as exc:
        raise StoreUnavailable(
            f"store unavailable: cannot read headgate's {engine} migrations ({exc})"
        ) from exc
    if not found:
        raise StoreUnavailable(f"store unavailable: headgate ships no {engine} migrations")
    return sorted(found, key=lambda m: m.version)


def known_versions(engine: str) -> set[int]:
    """The migration numbers this code ships."""
    return {m.version for m in migrations(engine)}


@dataclass(frozen=True)
class FunctionFile:
    """One file of server-side function text; ``digest`` tells whether a database has
    applied this exact text."""

    name: str
    sql: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def function_files(engine: str) -> list[FunctionFile]:
    """The current function text for ``engine``, in name order (none for SQLite)."""
    folder = files("headgate").joinpath("db", engine, "functions")
    try:
        if not folder.is_dir():
            return []
        found = [
            FunctionFile(e.name, e.read_text(encoding="utf-8"))
            for e in folder.iterdir() if e.name.endswith(".sql")
        ]
    except (OSError, ValueError) as exc:
        raise StoreUnavailable(
            f"store unavailable: cannot read headgate's {engine} functions ({exc})"
        ) from exc
    return sorted(found, key=lambda f: f.name)


_COMMENT = re.compile(r"--[^\n]*")


def has_statements(sql: str) -> bool:
    """False for a comment-only migration (a number that concerns the other engine)."""
    return bool(_COMMENT.sub("", sql).strip())
