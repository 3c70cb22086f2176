"""Typed records the store port returns (beside the job types of core/job.py): what the
API maps to JSON and the console words, so neither depends on an adapter's rows and no
HTTP wire shape crosses the port. One module per topic; every name is importable from
here."""

from .policy import (
    AdaptiveState,
    ConcurrencyLimit,
    QuarantineEntry,
    RateClassChange,
    RateClassState,
)
from .queues import PartitionState
from .upkeep import (
    BucketCounts,
    DutyHolder,
    OrphanSweep,
    PruneReport,
    TransactionHorizon,
    UniqueKeyCounts,
)
from .workers import HeartbeatReply, RunningJob, WorkerBeat, WorkerRecord

__all__ = ["AdaptiveState", "BucketCounts", "ConcurrencyLimit", "DutyHolder", "HeartbeatReply",
           "OrphanSweep", "PartitionState", "PruneReport", "QuarantineEntry", "RateClassChange",
           "RateClassState", "RunningJob", "TransactionHorizon", "UniqueKeyCounts", "WorkerBeat",
           "WorkerRecord"]
