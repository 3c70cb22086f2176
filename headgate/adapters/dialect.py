"""What differs between the engines inside otherwise shared SQL.

The SQL modules are written in the subset SQLite and PostgreSQL share (`?` placeholders
are translated by the PostgreSQL connection). The handful of places where the engines
truly differ — row locks, JSON tag tests, prefix ranges, per-queue admission locks —
ask the connection's dialect instead of branching on the backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# A queue's admission lock: headgate/db/postgres/functions/checks.sql's, which every
# PostgreSQL statement that takes the lock calls.
QUEUE_LOCK = "SELECT headgate_lock_queue_v1(?)"


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    # Appended to reads that precede a write of the same row (SQLite's write lock is
    # already database-wide, so it needs none).
    for_update: str
    skip_locked: str
    # One writer at a time (SQLite's database-wide write lock): a statement may change
    # rows in whatever order it finds them without deadlocking another transaction.
    serial_writes: bool

    def tag_test(self, marks: str) -> str:
        """A predicate true when jobs.tags (a JSON array) holds one of the marked values."""
        if self.name == "postgres":
            return f"jsonb_exists_any(jobs.tags::jsonb, ARRAY[{marks}]::text[])"
        return f"EXISTS (SELECT 1 FROM json_each(jobs.tags) WHERE value IN ({marks}))"

    def prefix_test(self, column: str) -> str:
        """`column` starts with the bound value; a range or function, never LIKE."""
        if self.name == "postgres":
            return f"starts_with({column}, ?)"
        return f"({column} >= ? AND {column} < ? || char(1114111))"

    def lock_queues(self, conn: Any, queues: Sequence[str]) -> None:
        """Serialize admission per queue so fairness deficits and ceilings stay exact."""
        if self.name == "postgres":
            for queue in sorted(queues):
                conn.execute(QUEUE_LOCK, (queue,))


SQLITE = Dialect("sqlite", for_update="", skip_locked="", serial_writes=True)
POSTGRES = Dialect("postgres", for_update=" FOR UPDATE", skip_locked=" FOR UPDATE SKIP LOCKED",
                   serial_writes=False)
