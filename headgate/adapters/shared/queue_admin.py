"""Queue figures the control API shows beside the counters: sampled memory and the
"quiet groups" view (how the queue looks without its one flooding partition).

Everything here is bounded: memory comes from a capped sample scaled by the counters,
and the partition figures read at most a fixed number of counter rows.
"""

from __future__ import annotations

from typing import Any

from headgate.core.envelope import check_int

# Jobs read per queue when sampling memory; the estimate scales their mean by the count.
MEMORY_SAMPLE_ROWS = 1000
# Fixed columns, row header and index entries: a rough per-row constant, documented as such.
ROW_OVERHEAD_BYTES = 200
MAX_SAMPLE_QUEUES = 1000
# How many partition counter rows and oldest available jobs are looked at per queue.
PARTITION_SCAN = 10_000
QUIET_OLDEST_SCAN = 2000

JOB_BYTES = (
    "length(id) + length(kind) + length(payload) + length(fingerprint) + length(tags) "
    "+ length(headers) + length(errors) + coalesce(length(result), 0) "
    "+ coalesce(length(output), 0) + coalesce(length(progress_message), 0)"
)


def pick_sample_queues(conn: Any, limit: int) -> list[str]:
    """The queues sampled least recently (never sampled first)."""
    check_int("limit", limit, 1, MAX_SAMPLE_QUEUES)
    return [r[0] for r in conn.execute(
        "SELECT q.name FROM queues q LEFT JOIN queue_memory m ON m.queue = q.name "
        "ORDER BY coalesce(m.sampled_at_ms, 0), q.name LIMIT ?", (limit,),
    ).fetchall()]


def measure(conn: Any, queue: str) -> tuple[int, int]:
    """(estimated bytes, jobs sampled) for one queue."""
    total = int(conn.execute(
        "SELECT coalesce(sum(n), 0) FROM queue_counts WHERE queue = ?", (queue,)
    ).fetchone()[0])
    sampled, size = conn.execute(
        f"SELECT count(*), coalesce(sum(b), 0) FROM (SELECT {JOB_BYTES} AS b FROM jobs "
        "WHERE queue = ? LIMIT ?) s", (queue, MEMORY_SAMPLE_ROWS),
    ).fetchone()
    if not sampled:
        return 0, 0
    return int(size / sampled * total) + total * ROW_OVERHEAD_BYTES, int(sampled)


def record(conn: Any, now: int, measured: dict[str, tuple[int, int]]) -> None:
    for queue, (size, sampled) in measured.items():
        conn.execute(
            "INSERT INTO queue_memory (queue, memory_bytes, sampled_jobs, sampled_at_ms) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (queue) DO UPDATE SET "
            "memory_bytes = excluded.memory_bytes, sampled_jobs = excluded.sampled_jobs, "
            "sampled_at_ms = excluded.sampled_at_ms",
            (queue, size, sampled, now),
        )


def extras(conn: Any, now: int) -> dict[str, dict[str, Any]]:
    """Per queue: the memory sample and the quiet-groups figures.

    A partition is *noisy* when it holds more than half of the queue's available jobs
    while another partition is waiting too. Without it, the quiet group is the whole
    queue. With it, the oldest available job outside that partition is looked for among
    the QUIET_OLDEST_SCAN oldest of the queue; rates per partition are not kept, so the
    quiet group's rates are unknown (None) and the figures are marked approximate."""
    memory = {
        q: (b, at) for q, b, at in conn.execute(
            "SELECT queue, memory_bytes, sampled_at_ms FROM queue_memory"
        ).fetchall()
    }
    out: dict[str, dict[str, Any]] = {}
    for (queue,) in conn.execute("SELECT name FROM queues ORDER BY name").fetchall():
        mem = memory.get(queue)
        info: dict[str, Any] = {
            "memory_bytes": mem[0] if mem else None,
            "memory_sampled_at_ms": mem[1] if mem else None,
            "noisy_partitions": 0,
            "quiet_oldest_available_ms": None,
            "quiet_exact": True,
        }
        waiting_parts, top = conn.execute(
            "SELECT count(*), coalesce(max(waiting), 0) FROM (SELECT waiting FROM partitions "
            "WHERE queue = ? AND waiting > 0 LIMIT ?) s", (queue, PARTITION_SCAN),
        ).fetchone()
        available = int(conn.execute(
            "SELECT coalesce(sum(n), 0) FROM queue_counts WHERE queue = ? AND state = 'available'",
            (queue,),
        ).fetchone()[0])
        if waiting_parts >= 2 and top * 2 > available:
            noisy = conn.execute(
                "SELECT partition_key FROM partitions WHERE queue = ? AND waiting = ? LIMIT 1",
                (queue, top),
            ).fetchone()[0]
            info["noisy_partitions"] = 1
            info["quiet_exact"] = False
            # `enqueued_at_ms IS NOT NULL` (always true) is what lets PostgreSQL walk
            # jobs_available_age for this (its migration 18), not sort the queue.
            oldest = conn.execute(
                "SELECT min(enqueued_at_ms) FROM (SELECT enqueued_at_ms, partition_key FROM jobs "
                "WHERE queue = ? AND state = 'available' AND enqueued_at_ms IS NOT NULL "
                "ORDER BY enqueued_at_ms LIMIT ?) s "
                "WHERE partition_key <> ?", (queue, QUIET_OLDEST_SCAN, noisy),
            ).fetchone()[0]
            if oldest is not None:
                info["quiet_oldest_available_ms"] = max(0, now - int(oldest))
        out[queue] = info
    return out
