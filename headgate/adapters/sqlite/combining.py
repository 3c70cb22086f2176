"""Group commit for short write actions of concurrent threads (SQLite's one writer).

Threads that would each open a write transaction for a few statements (an HTTP enqueue
with its Idempotency-Key) hand their action to a combiner instead (the leader/follower
machinery: headgate/adapters/shared/combiner.py): the leader runs every action waiting
once it holds the writer in ONE transaction and commits once. A transaction and a
commit are most of such a write's cost, and the threads no longer queue on the writer
lock one commit at a time.

Each action runs inside its own savepoint when it shares the transaction, so an action
that raises undoes only its own writes and its thread gets the exception; the others
commit. A failed commit fails every action of the batch: none of them is acknowledged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from headgate.adapters.shared.combiner import MAX_BATCH, Combiner, Slot
from headgate.adapters.shared.queries import load

from .connection import Database, unavailable

T = TypeVar("T")
Action = Callable[[sqlite3.Connection, int], Any]

Q = load(__name__)
SAVEPOINT, RELEASE, ROLLBACK_TO = Q["savepoint"], Q["release"], Q["rollback_to"]


class WriteCombiner(Combiner[Action, Any]):
    """Runs ``action(conn, now)`` in a write transaction it may share with other threads'
    actions (the module says how); returns what the action returned once it committed."""

    def __init__(self, db: Database, max_batch: int = MAX_BATCH) -> None:
        super().__init__(max_batch)
        self.db = db

    def run(self, action: Callable[[sqlite3.Connection, int], T]) -> T:  # type: ignore[override]
        return super().run(action)  # type: ignore[no-any-return]

    def _serve(self) -> None:
        with self.db.write() as (conn, now):
            # Taken once the writer is ours: whoever queued while we waited joins.
            self._run(conn, now, self._take())

    def _run(self, conn: sqlite3.Connection, now: int, batch: list[Slot[Action, Any]]) -> None:
        shared = len(batch) > 1
        for slot in batch:
            if shared:
                conn.execute(SAVEPOINT)
            try:
                slot.result = slot.request(conn, now)
            except Exception as exc:
                slot.error = unavailable(exc) if isinstance(exc, sqlite3.OperationalError) else exc
                if not shared:
                    raise  # alone: the whole transaction rolls back
                conn.execute(ROLLBACK_TO)
            if shared:
                conn.execute(RELEASE)
