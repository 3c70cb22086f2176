"""Read side: jobs, pages, counters, queue stats, partitions and history.

Nothing here counts rows of a queue: counts come from maintained tables, pages from
keyset scans over indexes that match their ORDER BY.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from headgate.core import STORED_STATES, UNFINISHED, Job, State
from headgate.core.errors import InvalidInput
from headgate.core.job import Blob, Progress
from headgate.core.schema_constants import HISTORY_BUCKET_MS

from . import adaptive
from .admission_limits import RateBucket
from .conn import Connection
from .control import RATE_CLASS_WAITING
from .rows import JOB_COLUMNS, JOB_COLUMNS_WITH_PAYLOAD, minute, row_to_job


def get_job(conn: Connection, job_id: str, include_payload: bool) -> Job | None:
    cols = JOB_COLUMNS_WITH_PAYLOAD if include_payload else JOB_COLUMNS
    row = conn.execute(f"SELECT {cols} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return row_to_job(row) if row else None


def get_result(conn: Connection, job_id: str) -> Blob | None:
    row = conn.execute(
        "SELECT result, result_schema_version FROM jobs WHERE id = ? AND result IS NOT NULL",
        (job_id,),
    ).fetchone()
    return Blob(bytes(row[0]), row[1]) if row else None


def get_output(conn: Connection, job_id: str) -> Blob | None:
    row = conn.execute(
        "SELECT output, output_schema_version, output_fence, output_updated_at_ms FROM jobs "
        "WHERE id = ? AND output IS NOT NULL", (job_id,),
    ).fetchone()
    return Blob(bytes(row[0]), row[1], row[2], row[3]) if row else None


def get_progress(conn: Connection, job_id: str) -> Progress | None:
    row = conn.execute(
        "SELECT progress_current, progress_total, progress_message, progress_fence, "
        "progress_updated_at_ms FROM jobs WHERE id = ? AND progress_updated_at_ms IS NOT NULL",
        (job_id,),
    ).fetchone()
    return Progress(*row) if row else None


def counts(conn: Connection, queue: str | None) -> dict[str, int]:
    result = {s.value: 0 for s in STORED_STATES}
    if queue is None:
        rows = conn.execute("SELECT state, sum(n) FROM queue_counts GROUP BY state")
    else:
        rows = conn.execute("SELECT state, n FROM queue_counts WHERE queue = ?", (queue,))
    for state, n in rows:
        result[state] = int(n)
    return result


def _rates(conn: Connection, now: int) -> dict[str, dict[str, float]]:
    """Per-queue arrival and drain per second over the last minute, from two buckets."""
    current = minute(now)
    frac = (now - current) / HISTORY_BUCKET_MS
    span_s = HISTORY_BUCKET_MS / 1000
    rates: dict[str, dict[str, float]] = defaultdict(lambda: {"arrived": 0.0, "drained": 0.0})
    for queue, bucket, arrived, completed, failed in conn.execute(
        "SELECT queue, bucket_ms, arrived, completed, failed FROM queue_history "
        "WHERE bucket_ms >= ?", (current - HISTORY_BUCKET_MS,),
    ):
        weight = 1.0 if bucket == current else 1.0 - frac
        rates[queue]["arrived"] += arrived * weight / span_s
        rates[queue]["drained"] += (completed + failed) * weight / span_s
    return rates


# One statement for every queue (a round trip per queue on PostgreSQL added up on every
# page that lists queues); each oldest age is one probe of jobs_available_age.
QUEUES_WITH_OLDEST = (
    "SELECT q.name, q.weight, q.paused, q.max_unfinished_jobs, "
    "(SELECT min(j.enqueued_at_ms) FROM jobs AS j "
    "WHERE j.queue = q.name AND j.state = 'available') "
    "FROM queues AS q ORDER BY q.name"
)


def queue_stats(conn: Connection, now: int) -> list[dict[str, Any]]:
    by_queue: dict[str, dict[str, int]] = defaultdict(dict)
    for queue, state, n in conn.execute("SELECT queue, state, n FROM queue_counts"):
        by_queue[queue][state] = n
    rates = _rates(conn, now)
    out = []
    for name, weight, paused, limit, oldest in conn.execute(QUEUES_WITH_OLDEST).fetchall():
        states = {s.value: by_queue[name].get(s.value, 0) for s in STORED_STATES}
        unfinished = sum(states[s.value] for s in UNFINISHED)
        arrival = round(rates[name]["arrived"], 3)
        drain = round(rates[name]["drained"], 3)
        backlog = unfinished - states[State.PENDING.value]
        if backlog == 0:
            ttd: int | None = 0
        elif drain > arrival:
            ttd = int(backlog / (drain - arrival) * 1000)
        else:
            ttd = None
        out.append({
            "queue": name,
            "weight": weight,
            "paused": bool(paused),
            "max_unfinished_jobs": limit,
            "unfinished_jobs": unfinished,
            "by_state": states,
            "arrival_rate": arrival,
            "drain_rate": drain,
            "time_to_drain_ms": ttd,
            "oldest_available_ms": None if oldest is None else max(0, now - oldest),
        })
    return out


def partitions(conn: Connection, queue: str, limit: int = 200) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT partition_key, deficit, waiting, running FROM partitions "
        "WHERE queue = ? AND (waiting > 0 OR running > 0) ORDER BY waiting DESC, partition_key "
        "LIMIT ?", (queue, limit),
    )
    return [
        {"partition_key": k, "deficit": d, "waiting": w, "running": r} for k, d, w, r in rows
    ]


def rate_classes(conn: Connection, now: int) -> list[dict[str, Any]]:
    out = []
    for row in conn.execute(
        f"SELECT name, {adaptive.COLUMNS} FROM rate_classes ORDER BY name"
    ).fetchall():
        bucket = RateBucket.load(row[1:7], now)
        waiting = conn.execute(RATE_CLASS_WAITING, (row[0],)).fetchone()[0]
        out.append({
            "name": row[0],
            "tokens_available": round(bucket.tokens, 3),
            "burst": bucket.burst,
            "limit_per_window": bucket.limit,
            "window_ms": bucket.window_ms,
            "jobs_waiting": waiting,
            "paused": bucket.paused,
            "refill_in_ms": bucket.refill_in_ms(1),
            "adaptive": adaptive.block(row[1:], row[0], conn),
        })
    return out


def concurrency_limits(conn: Connection) -> list[dict[str, Any]]:
    return [
        {"name": n, "queue": q, "max_concurrent": m, "on_saturated": s}
        for n, q, m, s in conn.execute(
            "SELECT name, queue, max_concurrent, on_saturated FROM concurrency_limits "
            "ORDER BY name"
        )
    ]


def quarantine_list(conn: Connection) -> list[dict[str, Any]]:
    return [
        {"fingerprint": f, "kind": k, "crash_count": c, "quarantined_at_ms": t, "reason": r}
        for f, k, c, t, r in conn.execute(
            "SELECT fingerprint, kind, crash_count, quarantined_at_ms, reason FROM quarantine "
            "ORDER BY quarantined_at_ms DESC"
        )
    ]


def history(
    conn: Connection, queue: str, since_ms: int, bucket_ms: int
) -> list[dict[str, Any]]:
    if (isinstance(bucket_ms, bool) or not isinstance(bucket_ms, int)
            or bucket_ms < HISTORY_BUCKET_MS):
        raise InvalidInput(f"bucket_ms must be an integer >= {HISTORY_BUCKET_MS}")
    merged: dict[int, dict[str, Any]] = {}
    for row in conn.execute(
        "SELECT bucket_ms, arrived, completed, failed, depth, rejected_rate_class, "
        "rejected_concurrency_limit, rejected_quarantine FROM queue_history "
        "WHERE queue = ? AND bucket_ms >= ? ORDER BY bucket_ms", (queue, since_ms),
    ):
        at = row[0] - row[0] % bucket_ms
        b = merged.setdefault(at, {
            "at_ms": at, "arrived": 0, "completed": 0, "failed": 0, "depth": None,
            "admission_rejections": {"rate_class": 0, "concurrency_limit": 0, "quarantine": 0},
        })
        b["arrived"] += row[1]
        b["completed"] += row[2]
        b["failed"] += row[3]
        if row[4] is not None:
            b["depth"] = row[4]
        rej = b["admission_rejections"]
        rej["rate_class"] += row[5]
        rej["concurrency_limit"] += row[6]
        rej["quarantine"] += row[7]
    return list(merged.values())


def history_counters(conn: Connection, since_ms: int) -> dict[str, dict[int, tuple[int, ...]]]:
    out: dict[str, dict[int, tuple[int, ...]]] = {}
    for queue, at, *counters in conn.execute(
        "SELECT queue, bucket_ms, arrived, completed, failed, rejected_rate_class, "
        "rejected_concurrency_limit, rejected_quarantine FROM queue_history "
        "WHERE bucket_ms >= ?", (since_ms,),
    ):
        out.setdefault(queue, {})[at] = tuple(counters)
    return out


def list_workers(conn: Connection, now: int, within_ms: int) -> list[dict[str, Any]]:
    out = []
    for row in conn.execute(
        "SELECT worker_id, host, pid, queues, concurrency, inflight, polls, empty_polls, "
        "started_at_ms, heartbeat_at_ms, status, pending_signal, agent, kinds FROM workers "
        "WHERE heartbeat_at_ms >= ? ORDER BY worker_id", (now - within_ms,),
    ):
        out.append({
            "worker_id": row[0], "host": row[1], "pid": row[2], "queues": json.loads(row[3]),
            "concurrency": row[4], "inflight": row[5], "polls": row[6], "empty_polls": row[7],
            "started_at_ms": row[8], "heartbeat_at_ms": row[9], "status": row[10],
            "pending_signal": row[11], "agent": row[12],
            "kinds": None if row[13] is None else json.loads(row[13]),
        })
    return out


# jobs_running's order: no sort, and never more rows than the fleet's slots.
RUNNING_JOBS = ("SELECT id, kind, queue, worker_id, attempted_at_ms, lease_expires_at_ms "
                "FROM jobs WHERE state = 'running' ORDER BY lease_expires_at_ms LIMIT ?")


def running_jobs(conn: Connection, limit: int) -> list[dict[str, Any]]:
    return [{"id": r[0], "kind": r[1], "queue": r[2], "worker_id": r[3],
             "attempted_at_ms": r[4], "lease_expires_at_ms": r[5]}
            for r in conn.execute(RUNNING_JOBS, (limit,)).fetchall()]
