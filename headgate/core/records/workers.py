"""Workers in the registry: what a heartbeat writes and its reply, a worker's row as
read back, and what each worker runs now."""

from __future__ import annotations

from dataclasses import dataclass

from headgate.core.job import Claim


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    """What a worker reports on each heartbeat (the registry row's fields it owns).
    `started_at_ms` None: the store's now. `agent` and `kinds` are a worker's on the
    HTTP worker protocol; a Python worker leaves them None."""

    worker_id: str
    host: str = ""
    pid: int = 0
    queues: tuple[str, ...] = ()
    concurrency: int = 0
    inflight: int = 0
    polls: int = 0
    empty_polls: int = 0
    started_at_ms: int | None = None
    status: str = "running"
    agent: str | None = None
    kinds: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """A pending operator signal (delivered once, then cleared) and which of the claims
    the worker said it runs are no longer its to run (cancelled, or moved on to
    another attempt)."""

    signal: str | None
    cancelled: tuple[Claim, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A worker's registry row: its last heartbeat's report, when it came, and an
    operator signal not yet delivered."""

    worker_id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    inflight: int
    polls: int
    empty_polls: int
    started_at_ms: int
    heartbeat_at_ms: int
    status: str
    pending_signal: str | None
    agent: str | None
    kinds: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job's lease: who holds it, since when (the attempt's start) and until
    when (None: no lease)."""

    id: str
    kind: str
    queue: str
    worker_id: str | None
    attempted_at_ms: int | None
    lease_expires_at_ms: int | None
