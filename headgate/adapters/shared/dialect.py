"""What differs between the engines inside otherwise shared SQL.

The shared modules are written in the subset SQLite and PostgreSQL share (`?`
placeholders are translated by the PostgreSQL connection). The handful of places where
the engines truly differ (row locks, JSON tag tests, prefix ranges, text order, per-queue
admission locks) ask the connection's dialect, one object per engine
(adapters/sqlite/dialect.py, adapters/postgres/dialect.py), instead of branching on the
backend's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar


class Dialect(ABC):
    name: ClassVar[str]
    # Appended to reads that precede a write of the same row (SQLite's write lock is
    # already database-wide, so it needs none).
    for_update: ClassVar[str]
    skip_locked: ClassVar[str]
    # One writer at a time (SQLite's database-wide write lock): a statement may change
    # rows in whatever order it finds them without deadlocking another transaction, and
    # no key or queue needs a lock of its own.
    serial_writes: ClassVar[bool]
    # A kind-prefix search is answered by listing the matching kinds first, then one
    # index range per kind (an engine whose planner cannot range-scan the prefix).
    lists_prefix_kinds: ClassVar[bool]
    # A partitions row with available jobs, written as the partial index of waiting
    # partitions is defined (partitions_waiting; PostgreSQL's partitions_gen_waiting),
    # so a read of them goes through it instead of every partition of the queue.
    waiting_partition: ClassVar[str]

    @abstractmethod
    def tag_test(self, marks: str) -> str:
        """A predicate true when jobs.tags (a JSON array) holds one of the marked values."""

    @abstractmethod
    def prefix_test(self, column: str) -> str:
        """`column` starts with the bound value; a range or function, never LIKE."""

    @abstractmethod
    def binary_order(self, column: str) -> str:
        """`column` compared byte by byte, as the index that serves its ranges sorts it."""

    @abstractmethod
    def lock_queues(self, conn: Any, queues: Sequence[str]) -> None:
        """Serialize admission per queue so fairness deficits and ceilings stay exact."""
