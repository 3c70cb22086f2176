"""Queue figures the control API shows beside the counters: sampled memory and the
"quiet groups" view (how the queue looks without its one flooding partition).

Everything here is bounded: memory comes from a capped sample scaled by the counters,
and the partition figures read at most a fixed number of counter rows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from headgate.core.envelope import check_int
from headgate.core.records import QueueExtras

from .queries import load

# Jobs read per queue when sampling memory; the estimate scales their mean by the count.
MEMORY_SAMPLE_ROWS = 1000
# Fixed columns, row header and index entries: a rough per-row constant, documented as such.
ROW_OVERHEAD_BYTES = 200
MAX_SAMPLE_QUEUES = 1000
# How many partition counter rows and oldest available jobs are looked at per queue.
PARTITION_SCAN = 10_000
QUIET_OLDEST_SCAN = 2000

Q = load(__name__)
PICK_SAMPLE_QUEUES = Q["pick_sample_queues"]
QUEUE_TOTAL = Q["queue_total"]
SAMPLE_BYTES = Q["sample_bytes"]
RECORD_MEMORY = Q["record_memory"]
MEMORY_SAMPLES = Q["memory_samples"]
QUEUE_NAMES = Q["queue_names"]
WAITING_PARTITIONS = Q["waiting_partitions"]
QUEUE_AVAILABLE = Q["queue_available"]
PARTITION_HOLDING = Q["partition_holding"]
QUIET_OLDEST = Q["quiet_oldest"]


def pick_sample_queues(conn: Any, limit: int) -> list[str]:
    """The queues sampled least recently (never sampled first)."""
    check_int("limit", limit, 1, MAX_SAMPLE_QUEUES)
    return [r[0] for r in conn.execute(PICK_SAMPLE_QUEUES, (limit,)).fetchall()]


def measure(conn: Any, queue: str) -> tuple[int, int]:
    """(estimated bytes, jobs sampled) for one queue."""
    total = int(conn.execute(QUEUE_TOTAL, (queue,)).fetchone()[0])
    sampled, size = conn.execute(SAMPLE_BYTES, (queue, MEMORY_SAMPLE_ROWS)).fetchone()
    if not sampled:
        return 0, 0
    return int(size / sampled * total) + total * ROW_OVERHEAD_BYTES, int(sampled)


def record(conn: Any, now: int, measured: dict[str, tuple[int, int]]) -> None:
    for queue, (size, sampled) in measured.items():
        conn.execute(RECORD_MEMORY, (queue, size, sampled, now))


def extras(conn: Any, now: int) -> dict[str, QueueExtras]:
    """Per queue: the memory sample and the quiet-groups figures.

    A partition is *noisy* when it holds more than half of the queue's available jobs
    while another partition is waiting too. Without it, the quiet group is the whole
    queue. With it, the oldest available job outside that partition is looked for among
    the QUIET_OLDEST_SCAN oldest of the queue; rates per partition are not kept, so the
    quiet group's rates are unknown and the figures are marked approximate."""
    memory = {
        q: (b, at) for q, b, at in conn.execute(MEMORY_SAMPLES).fetchall()
    }
    out: dict[str, QueueExtras] = {}
    waiting = conn.dialect.waiting_partition
    waiting_partitions = WAITING_PARTITIONS.format(waiting=waiting)
    partition_holding = PARTITION_HOLDING.format(waiting=waiting)
    for (queue,) in conn.execute(QUEUE_NAMES).fetchall():
        mem = memory.get(queue)
        sampled = QueueExtras(memory_bytes=mem[0], memory_sampled_at_ms=mem[1]) if mem \
            else QueueExtras()
        waiting_parts, top = conn.execute(waiting_partitions, (queue, PARTITION_SCAN)).fetchone()
        available = int(conn.execute(QUEUE_AVAILABLE, (queue,)).fetchone()[0])
        if waiting_parts >= 2 and top * 2 > available:
            noisy = conn.execute(partition_holding, (queue, top)).fetchone()[0]
            oldest = conn.execute(QUIET_OLDEST, (queue, QUIET_OLDEST_SCAN, noisy)).fetchone()[0]
            sampled = replace(sampled, noisy_partitions=1, quiet_exact=False,
                              quiet_oldest_available_ms=None if oldest is None
                              else max(0, now - int(oldest)))
        out[queue] = sampled
    return out
