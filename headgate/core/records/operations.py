"""Operator actions as the store records them: bulk operations and the audit log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Operation:
    """A bulk action (retry, cancel, delete, or a forced queue delete) over the jobs
    `selector` names (queue, state, kind, partition_key, older_than_ms: the ones given),
    done in bounded batches: `affected` so far of `total_estimated` (an estimate,
    `total_capped` when it stopped counting). A dry run is done when created."""

    id: str
    action: str
    selector: Mapping[str, str | int]
    dry_run: bool
    status: str
    affected: int
    total_estimated: int | None
    total_capped: bool
    error: str | None
    created_at_ms: int
    updated_at_ms: int
    finished_at_ms: int | None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One accepted operator change: who (a name, never a credential), what, on what,
    how it was answered. `detail` is the action's own JSON (a bulk filter, the values
    before and after, the ids touched), free-form by design."""

    id: int
    at_ms: int
    actor: str
    action: str
    target: str
    status: int
    outcome: str
    detail: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """What an Idempotency-Key already holds: `state` done (the answer a retry replays:
    status, headers, body) or in_progress (another request holds it), and the hash of
    the request that claimed it (a different request with the key is refused)."""

    request_hash: str
    state: str
    status: int | None
    headers: Mapping[str, str]
    body: bytes
