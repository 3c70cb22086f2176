"""What both engines' enqueue paths build alike: the jobs row of an envelope, the
unique-key bytes, and the result an enqueue reports."""

from __future__ import annotations

from dataclasses import dataclass

from headgate.core import Duplicate, Envelope, State
from headgate.core.schema_constants import DEFAULT_RETENTION_MS

from .rows import headers_text, tags_text


@dataclass(slots=True)
class EnqueueResult:
    ids: list[str]
    inserted: int
    queues: set[str]
    duplicate: Duplicate | None = None


def effective_unique_key(env: Envelope) -> bytes | None:
    if env.unique_key is None:
        return None
    if env.unique_exclude_kind:
        return b"\x01" + env.unique_key
    return b"\x00" + env.kind.encode() + b"\x00" + env.unique_key


def insert_row(env: Envelope, now: int) -> tuple:
    scheduled_at = env.scheduled_at_ms or now
    if env.unique_debounce_ms and env.unique_key is not None:
        scheduled_at = max(scheduled_at, now + env.unique_debounce_ms)
    if env.pending:
        state = State.PENDING
    elif scheduled_at > now:
        state = State.SCHEDULED
    else:
        state = State.AVAILABLE
    retention = DEFAULT_RETENTION_MS if env.retention_ms is None else env.retention_ms
    return (
        env.id, env.kind, env.schema_version, env.payload, env.fingerprint, env.queue,
        env.priority, env.partition_key, env.rate_class, env.weight, state.value,
        scheduled_at, env.max_attempts, retention,
        tags_text(env.tags), env.sticky_worker, headers_text(env.headers), now,
        env.periodic_schedule_id,
        env.periodic_tick_ms, int(env.pending),
    )
