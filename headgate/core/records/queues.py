"""Queues as the store reports them: counters and rates, partitions, minute history."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition with jobs waiting or running: its deficit round robin credit."""

    partition_key: str
    deficit: int
    waiting: int
    running: int
