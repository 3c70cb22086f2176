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
from headgate.core.records import (
    AdmissionRejections,
    ConcurrencyLimit,
    HistoryBucket,
    PartitionState,
    QuarantineEntry,
    QueueStats,
    RateClassState,
    RunningJob,
    WorkerRecord,
)
from headgate.core.schema_constants import HISTORY_BUCKET_MS

from . import adaptive
from .admission_limits import RateBucket
from .conn import Connection
from .control import RATE_CLASS_WAITING
from .queries import fill, load
from .rows import JOB_COLUMNS, JOB_COLUMNS_WITH_PAYLOAD, minute, row_to_job

Q = load(__name__)
SELECT_JOB = fill(Q["select_job"], columns=JOB_COLUMNS)
SELECT_JOB_WITH_PAYLOAD = fill(Q["select_job"], columns=JOB_COLUMNS_WITH_PAYLOAD)
SELECT_RESULT = Q["select_result"]
SELECT_OUTPUT = Q["select_output"]
SELECT_PROGRESS = Q["select_progress"]
COUNTS_ALL = Q["counts_all"]
COUNTS_OF_QUEUE = Q["counts_of_queue"]
RECENT_HISTORY = Q["recent_history"]
QUEUE_COUNTS = Q["queue_counts"]
QUEUES_WITH_OLDEST = Q["queues_with_oldest"]
PARTITIONS = Q["partitions"]
RATE_CLASSES = fill(Q["rate_classes"], columns=adaptive.COLUMNS)
CONCURRENCY_LIMITS = Q["concurrency_limits"]
QUARANTINE_LIST = Q["quarantine_list"]
QUEUE_HISTORY = Q["queue_history"]
HISTORY_COUNTERS = Q["history_counters"]
LIST_WORKERS = Q["list_workers"]
RUNNING_JOBS = Q["running_jobs"]


def get_job(conn: Connection, job_id: str, include_payload: bool) -> Job | None:
    sql = SELECT_JOB_WITH_PAYLOAD if include_payload else SELECT_JOB
    row = conn.execute(sql, (job_id,)).fetchone()
    return row_to_job(row) if row else None


def get_result(conn: Connection, job_id: str) -> Blob | None:
    row = conn.execute(SELECT_RESULT, (job_id,)).fetchone()
    return Blob(bytes(row[0]), row[1]) if row else None


def get_output(conn: Connection, job_id: str) -> Blob | None:
    row = conn.execute(SELECT_OUTPUT, (job_id,)).fetchone()
    return Blob(bytes(row[0]), row[1], row[2], row[3]) if row else None


def get_progress(conn: Connection, job_id: str) -> Progress | None:
    row = conn.execute(SELECT_PROGRESS, (job_id,)).fetchone()
    return Progress(*row) if row else None


def counts(conn: Connection, queue: str | None) -> dict[str, int]:
    result = {s.value: 0 for s in STORED_STATES}
    rows = conn.execute(COUNTS_ALL) if queue is None else conn.execute(COUNTS_OF_QUEUE,
                                                                          (queue,))
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
        RECENT_HISTORY, (current - HISTORY_BUCKET_MS,),
    ):
        weight = 1.0 if bucket == current else 1.0 - frac
        rates[queue]["arrived"] += arrived * weight / span_s
        rates[queue]["drained"] += (completed + failed) * weight / span_s
    return rates


def queue_stats(conn: Connection, now: int) -> list[QueueStats]:
    by_queue: dict[str, dict[str, int]] = defaultdict(dict)
    for queue, state, n in conn.execute(QUEUE_COUNTS):
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
        out.append(QueueStats(
            queue=name, weight=weight, paused=bool(paused), max_unfinished_jobs=limit,
            unfinished_jobs=unfinished, by_state=states, arrival_rate=arrival,
            drain_rate=drain, time_to_drain_ms=ttd,
            oldest_available_ms=None if oldest is None else max(0, now - oldest),
        ))
    return out


def partitions(conn: Connection, queue: str, limit: int = 200) -> list[PartitionState]:
    return [PartitionState(*row) for row in conn.execute(PARTITIONS, (queue, limit))]


def rate_classes(conn: Connection, now: int) -> list[RateClassState]:
    out = []
    for row in conn.execute(RATE_CLASSES).fetchall():
        bucket = RateBucket.load(row[1:7], now)
        waiting = conn.execute(RATE_CLASS_WAITING, (row[0],)).fetchone()[0]
        out.append(RateClassState(
            name=row[0], tokens_available=round(bucket.tokens, 3), burst=bucket.burst,
            limit_per_window=bucket.limit, window_ms=bucket.window_ms, jobs_waiting=waiting,
            paused=bucket.paused, refill_in_ms=bucket.refill_in_ms(1),
            adaptive=adaptive.state(row[1:], row[0], conn),
        ))
    return out


def concurrency_limits(conn: Connection) -> list[ConcurrencyLimit]:
    return [ConcurrencyLimit(*row) for row in conn.execute(CONCURRENCY_LIMITS)]


def quarantine_list(conn: Connection) -> list[QuarantineEntry]:
    return [QuarantineEntry(*row) for row in conn.execute(QUARANTINE_LIST)]


def history(
    conn: Connection, queue: str, since_ms: int, bucket_ms: int
) -> list[HistoryBucket]:
    """The minute buckets merged into buckets of `bucket_ms`: counters summed, the
    latest depth kept."""
    if (isinstance(bucket_ms, bool) or not isinstance(bucket_ms, int)
            or bucket_ms < HISTORY_BUCKET_MS):
        raise InvalidInput(f"bucket_ms must be an integer >= {HISTORY_BUCKET_MS}")
    # at -> [arrived, completed, failed, depth, rate_class, concurrency_limit, quarantine]
    merged: dict[int, list[Any]] = {}
    for row in conn.execute(QUEUE_HISTORY, (queue, since_ms)):
        b = merged.setdefault(row[0] - row[0] % bucket_ms, [0, 0, 0, None, 0, 0, 0])
        for i in (0, 1, 2, 4, 5, 6):
            b[i] += row[i + 1]
        if row[4] is not None:
            b[3] = row[4]
    return [HistoryBucket(at, b[0], b[1], b[2], b[3], AdmissionRejections(b[4], b[5], b[6]))
            for at, b in merged.items()]


def history_counters(conn: Connection, since_ms: int) -> dict[str, dict[int, tuple[int, ...]]]:
    out: dict[str, dict[int, tuple[int, ...]]] = {}
    for queue, at, *counters in conn.execute(HISTORY_COUNTERS, (since_ms,)):
        out.setdefault(queue, {})[at] = tuple(counters)
    return out


def list_workers(conn: Connection, now: int, within_ms: int) -> list[WorkerRecord]:
    return [WorkerRecord(
        worker_id=row[0], host=row[1], pid=row[2], queues=tuple(json.loads(row[3])),
        concurrency=row[4], inflight=row[5], polls=row[6], empty_polls=row[7],
        started_at_ms=row[8], heartbeat_at_ms=row[9], status=row[10], pending_signal=row[11],
        agent=row[12], kinds=None if row[13] is None else tuple(json.loads(row[13])),
    ) for row in conn.execute(LIST_WORKERS, (now - within_ms,))]


def running_jobs(conn: Connection, limit: int) -> list[RunningJob]:
    return [RunningJob(*row) for row in conn.execute(RUNNING_JOBS, (limit,)).fetchall()]
