"""Queues as the store reports them: counters and rates, partitions, minute history."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition with jobs waiting or running: its deficit round robin credit."""

    partition_key: str
    deficit: int
    waiting: int
    running: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """A queue's settings and maintained counters (`by_state`: every stored state's
    count), and its last minute's arrival and drain per second with the time to drain
    they imply (None: not draining) and the age of its oldest available job."""

    queue: str
    weight: int
    paused: bool
    max_unfinished_jobs: int | None
    unfinished_jobs: int
    by_state: Mapping[str, int]
    arrival_rate: float
    drain_rate: float
    time_to_drain_ms: int | None
    oldest_available_ms: int | None


@dataclass(frozen=True, slots=True)
class QueueExtras:
    """The figures beside a queue's counters: its last memory sample (None: never
    sampled) and its quiet groups, the queue without a noisy partition (one holding
    more than half of the available jobs while others wait). `quiet_exact` False: the
    quiet figures come from a bounded sample."""

    memory_bytes: int | None = None
    memory_sampled_at_ms: int | None = None
    noisy_partitions: int = 0
    quiet_oldest_available_ms: int | None = None
    quiet_exact: bool = True


@dataclass(frozen=True, slots=True)
class AdmissionRejections:
    """Jobs admission held back in a bucket, by policy: the most one admission pass
    turned away (a sum over passes would count polls)."""

    rate_class: int = 0
    concurrency_limit: int = 0
    quarantine: int = 0


@dataclass(frozen=True, slots=True)
class HistoryBucket:
    """A queue's counters over one bucket from `at_ms`; `depth` its unfinished jobs
    when the history duty last looked (None: not looked in this bucket)."""

    at_ms: int
    arrived: int = 0
    completed: int = 0
    failed: int = 0
    depth: int | None = None
    admission_rejections: AdmissionRejections = AdmissionRejections()


@dataclass(frozen=True, slots=True)
class ForecastInputs:
    """What the start forecast reads beyond the counters, each part bounded: `ahead`,
    per waiting job asked about, the available jobs before it in its partition's
    admission order (counted up to `ahead_limit`); `oldest`, per queue asked about, its
    longest-waiting available job; `classes`, per such queue, its available jobs by
    rate class in a sample of at most `class_sample`."""

    ahead: Mapping[str, int]
    oldest: Mapping[str, str]
    classes: Mapping[str, Mapping[str, int]]
    ahead_limit: int
    class_sample: int
