"""Read models the store returns: jobs, claims and inspection records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .states import State


@dataclass(slots=True)
class Job:
    id: str
    kind: str
    queue: str
    state: State
    schema_version: int
    priority: int
    partition_key: str
    rate_class: str
    weight: int
    fingerprint: str
    scheduled_at_ms: int
    max_attempts: int
    retention_ms: int
    tags: tuple[str, ...]
    sticky_worker: str
    headers: dict[str, str]
    attempt: int
    crash_attempt: int
    fence: int
    lease_id: str | None
    lease_expires_at_ms: int | None
    worker_id: str | None
    enqueued_at_ms: int
    attempted_at_ms: int | None
    finalized_at_ms: int | None
    errors: list[dict[str, Any]]
    periodic_schedule_id: str
    periodic_tick_ms: int | None
    cancel_requested: bool
    payload: bytes | None = None
    pending: bool = False

    @property
    def periodic_origin(self) -> dict[str, Any] | None:
        if not self.periodic_schedule_id:
            return None
        return {"schedule_id": self.periodic_schedule_id, "tick_ms": self.periodic_tick_ms}


@dataclass(frozen=True, slots=True)
class Claim:
    """What admit hands a worker: the job plus the fencing triple for every later write."""

    job: Job
    lease_id: str
    fence: int
    lease_expires_at_ms: int


@dataclass(frozen=True, slots=True)
class AckRequest:
    """One finished attempt, for acknowledging many in one transaction."""

    claim: Claim
    outcome: str
    error: str | None = None
    delay_ms: int | None = None
    result: bytes | None = None
    result_schema_version: int = 1
    logs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Blob:
    """A result or output: opaque bytes with the schema version the handler wrote."""

    bytes: bytes
    schema_version: int
    fence: int = 0
    updated_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class Progress:
    current: int
    total: int
    message: str | None
    fence: int
    updated_at_ms: int


@dataclass(slots=True)
class Explanation:
    admissible: bool
    blocked_by: str | None
    detail: dict[str, Any] = field(default_factory=dict)
    estimated_admission_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "admissible": self.admissible,
            "blocked_by": self.blocked_by,
            "detail": self.detail,
            "estimated_admission_ms": self.estimated_admission_ms,
        }


@dataclass(slots=True)
class JobFilter:
    """Which jobs a list or bulk operation means: every field narrows; tags_all needs all,
    tags_any needs one."""

    id: str | None = None
    queue: str | None = None
    state: str | None = None
    kind: str | None = None
    kind_prefix: str | None = None
    partition_key: str | None = None
    rate_class: str | None = None
    fingerprint: str | None = None
    priority: int | None = None
    tags_all: list[str] = field(default_factory=list)
    tags_any: list[str] = field(default_factory=list)
    older_than_ms: int | None = None
    # The first line of the job's last error starts with this (`error:` in the search).
    error_prefix: str | None = None
    # `payload:` / `payload.PATH:` terms (core.job_search.PayloadTerm), all must match;
    # checked on the decoded payload of at most a bounded number of jobs per page.
    payload_terms: list[Any] = field(default_factory=list)
    # Time ranges: after is inclusive, before exclusive (epoch ms). `finished` is the
    # job's finalization, so a finished bound leaves unfinished jobs out.
    enqueued_after_ms: int | None = None
    enqueued_before_ms: int | None = None
    finished_after_ms: int | None = None
    finished_before_ms: int | None = None


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[Job]
    next_cursor: str | None
    # The page stopped at its scan bound (a payload search, or a filter with more than
    # its index answers) before filling: next_cursor (when set) continues the scan.
    scan_limited: bool = False
