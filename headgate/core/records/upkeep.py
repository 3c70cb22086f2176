"""The store's upkeep: what holds its cleanup back, who holds the duty leases, its
unique keys and minute buckets, and what a prune of finished jobs found."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class TransactionHorizon:
    """What holds a store's cleanup back, for monitoring. A long-held snapshot keeps
    every row version (PostgreSQL) or WAL frame (SQLite) written after it; None is a
    figure the engine cannot know."""

    engine: str
    # SQLite: the WAL file's size on disk, and the size past which it is truncated.
    wal_bytes: int | None = None
    wal_limit_bytes: int | None = None
    # Age of the oldest open transaction (None: none open).
    oldest_transaction_ms: int | None = None
    # Whose transactions: this process's connections only, or every session.
    transactions_seen: Literal["process", "database"] | None = None
    # PostgreSQL: transactions since the oldest snapshot still held.
    xmin_age: int | None = None


@dataclass(frozen=True, slots=True)
class DutyHolder:
    """Who holds a duty lease, until when (store time; past it, anyone may take it)."""

    name: str
    holder: str
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class OrphanSweep:
    """The sweep for lifecycle unique keys whose job is gone: keys deleted, passes
    finished, when the last pass finished (None: none yet)."""

    pruned: int = 0
    passes: int = 0
    pass_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class UniqueKeyCounts:
    """All unique keys, window keys past their window (retention deletes those), and
    the orphan sweep's totals."""

    rows: int
    expired: int
    orphans: OrphanSweep


@dataclass(frozen=True, slots=True)
class BucketCounts:
    """One table of minute buckets (history or latency): its rows, those older than
    the retention horizon asked about, and the oldest bucket's start (None: empty)."""

    rows: int
    expired: int
    oldest_bucket_ms: int | None


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What a prune of terminal jobs finalized before `cutoff_ms` (now - older_than_ms)
    found, by state, and deleted (0 on a dry run)."""

    dry_run: bool
    older_than_ms: int
    cutoff_ms: int
    counts: dict[str, int]
    total: int
    deleted: int


__all__ = ["BucketCounts", "DutyHolder", "OrphanSweep", "PruneReport", "TransactionHorizon",
           "UniqueKeyCounts"]
