"""SQLite's answers to the shared SQL's engine questions (adapters/shared/dialect.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from headgate.adapters.shared.dialect import Dialect


class SqliteDialect(Dialect):
    name = "sqlite"
    for_update = ""
    skip_locked = ""
    serial_writes = True
    lists_prefix_kinds = True
    waiting_partition = "waiting > 0"

    def tag_test(self, marks: str) -> str:
        return f"EXISTS (SELECT 1 FROM json_each(jobs.tags) WHERE value IN ({marks}))"

    def prefix_test(self, column: str) -> str:
        return f"({column} >= ? AND {column} < ? || char(1114111))"

    def binary_order(self, column: str) -> str:
        return column  # SQLite's default collation is already binary

    def lock_queues(self, conn: Any, queues: Sequence[str]) -> None:
        """Nothing to take: the write transaction holds the whole database."""


SQLITE = SqliteDialect()
