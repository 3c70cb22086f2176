"""``WorkerConfig``: every setting of one worker, checked once, fixed for its run.

A frozen value built by ``Worker(...)`` and replaced whole by ``Worker.configure``
(``WorkerConfig.replace`` checks the result again), so a half-applied change never
exists; ``Engine`` and the threads it starts read their settings from it. A leaf of the
worker package: it imports nothing of the runtime.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from headgate.core import InvalidInput

from .default_duties import DEFAULT_RESIGN_COOLDOWN_MS, duty_names
from .job_context import DEFAULT_MAX_LOG_LINES

# The shortest lease a worker takes. The lease keeper renews every third of the lease
# in one store round trip that must commit before the lease ends: at 250 ms that is a
# renewal every ~83 ms with ~170 ms to spare, and below it one slow commit or a pause of
# the process loses the leases of healthy jobs (which then run twice).
MIN_LEASE_MS = 250

# Settings that must be whole milliseconds >= 1, in the order they are checked.
_REQUIRED_MS = (
    "heartbeat_ms", "timeout_grace_ms", "kill_grace_ms", "duty_interval_ms",
    "poll_floor_ms", "poll_ceiling_ms", "probe_interval_ms", "hint_ceiling_ms",
    "idle_probe_interval_ms", "idle_after_ms",
)


def positive_ms(name: str, value: int | None, *, optional: bool = True) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{name} must be an integer >= 1 (milliseconds)")
    return value


def queue_names(queues: Sequence[str] | str) -> tuple[str, ...]:
    """A comma-separated string or a list; duplicates dropped, order kept."""
    if isinstance(queues, str):
        queues = [q for q in queues.split(",") if q]
    try:
        names = tuple(dict.fromkeys(queues))
    except TypeError:
        names = ()
    if not names or not all(isinstance(q, str) and q for q in names):
        raise InvalidInput("queues must be a non-empty list of queue names")
    return names


@dataclass(frozen=True)
class WorkerConfig:
    """Durations in milliseconds; ``Worker``'s docstring says what each one does."""

    worker_id: str
    queues: tuple[str, ...] = ("default",)
    concurrency: int = 10
    lease_ms: int = 30_000
    heartbeat_ms: int = 2_000
    drain_ms: int = 30_000
    timeout_ms: int | None = None
    deadline_ms: int | None = None
    timeout_grace_ms: int = 5_000
    kill_grace_ms: int = 5_000
    isolated: bool = False
    duties: tuple[str, ...] = ()
    duty_interval_ms: int = 1_000
    resign_cooldown_ms: int = DEFAULT_RESIGN_COOLDOWN_MS
    poll_floor_ms: int = 5
    poll_ceiling_ms: int = 1_000
    probe_interval_ms: int = 2
    idle_probe_interval_ms: int = 20
    idle_after_ms: int = 5_000
    hint_ceiling_ms: int = 100
    quantum: int | None = None
    max_log_lines: int = DEFAULT_MAX_LOG_LINES
    job_log_level: int = logging.INFO
    log_on_success: bool = False

    def __post_init__(self) -> None:
        # Normalized here so that every way of building one (the constructor, replace)
        # is checked the same way; a frozen value is set through object.__setattr__.
        for name in _REQUIRED_MS:
            positive_ms(name, getattr(self, name), optional=False)
        object.__setattr__(self, "queues", queue_names(self.queues))
        concurrency = self.concurrency
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInput("concurrency must be an integer >= 1")
        lease_ms = self.lease_ms
        if isinstance(lease_ms, int) and not isinstance(lease_ms, bool) \
                and 0 < lease_ms < MIN_LEASE_MS:
            raise InvalidInput(f"lease_ms must be at least {MIN_LEASE_MS} (milliseconds): "
                               "shorter leases expire between renewals")
        positive_ms("lease_ms", lease_ms, optional=False)
        drain_ms = self.drain_ms
        if isinstance(drain_ms, bool) or not isinstance(drain_ms, int) or drain_ms < 0:
            raise InvalidInput("drain_ms must be an integer >= 0 (milliseconds)")
        positive_ms("timeout_ms", self.timeout_ms)
        positive_ms("deadline_ms", self.deadline_ms)
        object.__setattr__(self, "isolated", bool(self.isolated))
        object.__setattr__(self, "duties", duty_names(self.duties))

    @classmethod
    def build(cls, worker_id: str, *, duties: bool | Iterable[str] = True,
              queues: Sequence[str] | str = ("default",), **settings: Any) -> WorkerConfig:
        """``queues`` and ``duties`` as ``Worker`` takes them (a comma-separated string or
        a list; duties True: the worker's defaults), normalized by ``__post_init__``."""
        return cls(worker_id, queues=queues, duties=duties, **settings)  # type: ignore[arg-type]

    def replace(self, **changes: Any) -> WorkerConfig:
        """A new config with ``changes`` applied (``None`` means: keep), checked whole."""
        given = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, **given)
