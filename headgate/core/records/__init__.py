"""Typed records the store port returns (beside the job types of core/job.py): what the
API maps to JSON and the console words, so neither depends on an adapter's rows and no
HTTP wire shape crosses the port. One module per topic; every name is importable from
here."""

from .operations import AuditEntry, IdempotencyRecord, Operation
from .policy import (
    AdaptiveState,
    ConcurrencyLimit,
    QuarantineEntry,
    RateClassChange,
    RateClassState,
)
from .queues import (
    AdmissionRejections,
    ForecastInputs,
    HistoryBucket,
    PartitionState,
    QueueExtras,
    QueueStats,
)
from .schedules import Schedule, ScheduleEventEntry
from .upkeep import (
    BucketCounts,
    DutyHolder,
    OrphanSweep,
    PruneReport,
    TransactionHorizon,
    UniqueKeyCounts,
)
from .workers import HeartbeatReply, RunningJob, WorkerBeat, WorkerRecord

__all__ = ["AdaptiveState", "AdmissionRejections", "AuditEntry", "BucketCounts", "ConcurrencyLimit",
           "DutyHolder", "ForecastInputs", "HeartbeatReply", "HistoryBucket", "IdempotencyRecord",
           "Operation", "OrphanSweep", "PartitionState", "PruneReport", "QuarantineEntry",
           "QueueExtras", "QueueStats", "RateClassChange", "RateClassState", "RunningJob",
           "Schedule", "ScheduleEventEntry", "TransactionHorizon", "UniqueKeyCounts", "WorkerBeat",
           "WorkerRecord"]
