"""The connection shape the shared SQL modules are written against.

sqlite3's connection has it natively; the PostgreSQL adapter wraps psycopg to match.
`dialect` names the few places the engines differ (see headgate.adapters.shared.dialect).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from headgate.adapters.shared.dialect import Dialect


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...  # read-only, as on sqlite3's and psycopg's cursors

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Any: ...


class Connection(Protocol):
    dialect: Dialect

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Cursor: ...
