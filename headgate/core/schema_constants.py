"""The numbers the stored schema needs, each written once: here.

The SQL never spells them out; it names them. `headgate migrate` writes them into the
database from this module (headgate/adapters/migrations.py): on PostgreSQL as IMMUTABLE
SQL functions `headgate_<name>()` (the planner inlines them, so a call costs what the
literal did), on SQLite as the rows of the table `schema_constants` that its triggers
read. A changed value is re-applied by the next `headgate migrate`; an unchanged one
writes nothing. The latency histogram's bounds are `LATENCY_BOUNDS_MS` in
core/latency.py, written into the database the same way.

Python code that needs one of these imports it from here, so the Python and the SQL
side cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# queue_history and queue_latency rows are per bucket of this width (a minute).
HISTORY_BUCKET_MS = 60_000
# How long a finished job is kept when its envelope does not say (a day).
DEFAULT_RETENTION_MS = 24 * 3_600_000
# PostgreSQL: the hash seed of hashtextextended() for a queue's admission advisory lock. Every
# statement that takes a queue lock must use the same one, or two writers of one queue
# stop excluding each other.
QUEUE_LOCK_SEED = 7
# PostgreSQL: the hash seed of hashtextextended() for a unique key's advisory lock (and an
# Idempotency-Key's), a different space from the queue locks'.
KEY_LOCK_SEED = 11
# PostgreSQL: the advisory lock (one bigint, outside the hash spaces above in practice)
# that every writer of the counter rows holds shared and a new counter generation takes
# exclusively (db/postgres/0027_counter_generations.sql).
COUNTERS_LOCK_KEY = 0x6865616467617465
# Envelope.unique_replace: what a duplicate enqueue overwrites on a holder still waiting.
REPLACE_PAYLOAD = 1
REPLACE_SCHEDULED_AT = 2
REPLACE_PRIORITY = 4
REPLACE_MAX_ATTEMPTS = 8
# A wake-up NOTIFY names its queues when they fit in this many characters (PostgreSQL
# limits a payload to 8000 bytes); longer, it says only "something changed".
NOTIFY_QUEUES_MAX_CHARS = 7_000
# A job's error history keeps its newest entries, each error text cut to this length.
MAX_ERRORS_KEPT = 25
ERROR_TEXT_MAX_CHARS = 4_096
# jobs.last_error: the first line of the newest error, cut to this length.
LAST_ERROR_MAX_CHARS = 200
# PostgreSQL: how many rows a partition's scan fence may fall behind the first job a
# claim takes before admission moves it forward (a write of the partition row): the bound
# on index entries of claimed jobs a candidate scan walks while vacuum is held back.
SCAN_FENCE_SLACK = 256

# The name each value has in SQL: `headgate_<name>()` on PostgreSQL, the row `<name>` of
# `schema_constants` on SQLite.
SQL_CONSTANTS: Mapping[str, int] = MappingProxyType({
    "history_bucket_ms": HISTORY_BUCKET_MS,
    "default_retention_ms": DEFAULT_RETENTION_MS,
    "queue_lock_seed": QUEUE_LOCK_SEED,
    "key_lock_seed": KEY_LOCK_SEED,
    "counters_lock_key": COUNTERS_LOCK_KEY,
    "replace_payload": REPLACE_PAYLOAD,
    "replace_scheduled_at": REPLACE_SCHEDULED_AT,
    "replace_priority": REPLACE_PRIORITY,
    "replace_max_attempts": REPLACE_MAX_ATTEMPTS,
    "notify_queues_max_chars": NOTIFY_QUEUES_MAX_CHARS,
    "max_errors_kept": MAX_ERRORS_KEPT,
    "error_text_max_chars": ERROR_TEXT_MAX_CHARS,
    "last_error_max_chars": LAST_ERROR_MAX_CHARS,
    "scan_fence_slack": SCAN_FENCE_SLACK,
})
