"""PostgreSQL's answers to the shared SQL's engine questions (adapters/shared/dialect.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from headgate.adapters.shared.dialect import Dialect

# A queue's admission lock: headgate/db/postgres/functions/checks.sql's, which every
# PostgreSQL statement that takes the lock calls.
QUEUE_LOCK = "SELECT headgate_lock_queue_v1(?)"


class PostgresDialect(Dialect):
    name = "postgres"
    for_update = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    serial_writes = False
    lists_prefix_kinds = False
    # The index reads a flag that a partition keeps until the retention duty finds it
    # empty (db/postgres/0026_partitions_waiting_flag.sql); the count drops the emptied.
    waiting_partition = "has_waiting AND waiting > 0"

    def tag_test(self, marks: str) -> str:
        return f"jsonb_exists_any(jobs.tags::jsonb, ARRAY[{marks}]::text[])"

    def prefix_test(self, column: str) -> str:
        return f"starts_with({column}, ?)"

    def binary_order(self, column: str) -> str:
        return f'{column} COLLATE "C"'

    def lock_queues(self, conn: Any, queues: Sequence[str]) -> None:
        for queue in sorted(queues):
            conn.execute(QUEUE_LOCK, (queue,))


POSTGRES = PostgresDialect()
