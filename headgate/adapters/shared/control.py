"""Operator control: job actions, queue and policy settings, workers and duty leases."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from headgate.core import Claim, InvalidTransition, NotFound, State, transition
from headgate.core.adaptive import Adaptive
from headgate.core.envelope import INT32_MAX, MAX_PAYLOAD, check_int, check_text
from headgate.core.errors import InvalidInput
from headgate.core.policy import SATURATION_STRATEGIES, WORKER_SIGNALS
from headgate.core.records import HeartbeatReply, WorkerBeat

from . import adaptive as adaptive_rules
from .admission_limits import RateBucket
from .conn import Connection
from .queries import fill, load

Q = load(__name__)
RATE_CLASS_WAITING = Q["rate_class_waiting"]
SELECT_JOB_STATE = Q["select_job_state"]
ENSURE_QUEUE = Q["ensure_queue"]
OPERATOR_RETRY = Q["operator_retry"]
OPERATOR_CANCEL = Q["operator_cancel"]
DELETE_JOB = Q["delete_job"]
PROMOTE_JOB = Q["promote_job"]
RESCHEDULE_JOB = Q["reschedule_job"]
EDIT_PAYLOAD = Q["edit_payload"]
DELETE_QUARANTINE_ENTRY = Q["delete_quarantine_entry"]
RELEASE_QUARANTINED = Q["release_quarantined"]
# The queue settings an operator sets, one statement each (set_queue's allow-list).
SET_QUEUE = {column: fill(Q["set_queue_column"], column=column)
             for column in ("paused", "weight", "max_unfinished_jobs")}
UPSERT_RATE_CLASS = Q["upsert_rate_class"]
UPSERT_CONCURRENCY_LIMIT = Q["upsert_concurrency_limit"]
RATE_CLASS_EXISTS = Q["rate_class_exists"]
DELETE_RATE_CLASS = Q["delete_rate_class"]
CONCURRENCY_LIMIT_QUEUE = Q["concurrency_limit_queue"]
QUEUE_GOVERNED = Q["queue_governed"]
DELETE_CONCURRENCY_LIMIT = Q["delete_concurrency_limit"]
UPSERT_WORKER = Q["upsert_worker"]
SELECT_PENDING_SIGNAL = Q["select_pending_signal"]
CLEAR_PENDING_SIGNAL = Q["clear_pending_signal"]
SELECT_RUNNING_CHECK = Q["select_running_check"]
SIGNAL_WORKER = Q["signal_worker"]
CLAIM_DUTY = Q["claim_duty"]
SELECT_DUTY_HOLDER = Q["select_duty_holder"]
RENEW_DUTY = Q["renew_duty"]
RELEASE_DUTY = Q["release_duty"]


def _job_state(conn: Connection, job_id: str) -> tuple:
    sql = SELECT_JOB_STATE.format(for_update=conn.dialect.for_update)
    row = conn.execute(sql, (job_id,)).fetchone()
    if row is None:
        raise NotFound("job", job_id)
    return row


def operator_retry(conn: Connection, now: int, job_id: str) -> str:
    state, queue, attempt, max_attempts, _ = _job_state(conn, job_id)
    rule = transition(state, "operator_retry")
    # One more attempt even when the budget is spent, or the retry would be a no-op.
    conn.execute(OPERATOR_RETRY,
                 (rule.target.value, now, max(max_attempts, attempt + 1), job_id))
    return queue


def operator_cancel(conn: Connection, now: int, job_id: str) -> str:
    state, queue, *_ = _job_state(conn, job_id)
    rule = transition(state, "operator_cancel")
    conn.execute(OPERATOR_CANCEL,
                 (rule.target.value, int(state == State.RUNNING.value), now, now, job_id))
    return queue


def delete_job(conn: Connection, job_id: str) -> str:
    _, queue, *_ = _job_state(conn, job_id)
    conn.execute(DELETE_JOB, (job_id,))
    return queue


def promote_job(conn: Connection, now: int, job_id: str) -> str:
    state, queue, *_ = _job_state(conn, job_id)
    rule = transition(state, "operator_promote")
    conn.execute(PROMOTE_JOB, (rule.target.value, now, now, job_id))
    return queue


def reschedule_job(conn: Connection, now: int, job_id: str, at_ms: int) -> str:
    check_int("scheduled_at_ms", at_ms, 0)
    state, queue, *_ = _job_state(conn, job_id)
    if state not in (State.SCHEDULED.value, State.RETRYABLE.value, State.PENDING.value):
        raise InvalidTransition(
            f"cannot reschedule a job in state {state}: only scheduled, retryable or pending"
        )
    conn.execute(RESCHEDULE_JOB, (at_ms, job_id))
    return queue


def edit_payload(
    conn: Connection, job_id: str, payload: bytes, schema_version: int, fp: str
) -> str:
    if not isinstance(payload, bytes | bytearray) or len(payload) > MAX_PAYLOAD:
        raise InvalidInput(f"payload must be bytes of at most {MAX_PAYLOAD}")
    check_int("schema_version", schema_version, 1, INT32_MAX)
    state, queue, *_ = _job_state(conn, job_id)
    if state == State.RUNNING.value:
        raise InvalidTransition("cannot edit the payload of a running job")
    conn.execute(EDIT_PAYLOAD, (bytes(payload), schema_version, fp, job_id))
    return queue


def quarantine_release(conn: Connection, now: int, fp: str) -> tuple[int, set[str]]:
    check_text("fingerprint", fp)
    entry = conn.execute(DELETE_QUARANTINE_ENTRY, (fp,)).rowcount
    rule = transition(State.QUARANTINED, "operator_release")
    rows = conn.execute(RELEASE_QUARANTINED, (rule.target.value, now, fp)).fetchall()
    if not entry and not rows:
        raise NotFound("quarantined fingerprint", fp)
    return len(rows), {r[0] for r in rows}


def ensure_queue(conn: Connection, now: int, queue: str) -> None:
    check_text("queue", queue)
    conn.execute(ENSURE_QUEUE, (queue, now))


def set_queue(conn: Connection, now: int, queue: str, column: str, value: Any) -> None:
    ensure_queue(conn, now, queue)
    conn.execute(SET_QUEUE[column], (value, queue))


def upsert_rate_class(
    conn: Connection, now: int, name: str, limit: int, window_ms: int,
    burst: int | None, paused: bool, adaptive: Adaptive | None = None,
) -> None:
    check_text("rate class name", name)
    check_int("limit", limit, 1)
    check_int("window_ms", window_ms, 1)
    burst = max(limit, 1) if burst is None else check_int("burst", burst, 1)
    if not isinstance(paused, bool):
        raise InvalidInput("paused must be a boolean")
    if adaptive is not None and not isinstance(adaptive, Adaptive):
        raise InvalidInput("adaptive must be an Adaptive (headgate.core.adaptive)")
    row = conn.execute(adaptive_rules.SELECT_CLASS.format(
        for_update=conn.dialect.for_update), (name,)).fetchone()  # type: ignore[attr-defined]
    limit, burst, extra = adaptive_rules.configure(conn, now, name, limit, window_ms, burst,
                                                   adaptive, row)
    tokens = float(burst) if row is None else min(float(burst),
                                                  RateBucket.load(row[:6], now).tokens)
    conn.execute(UPSERT_RATE_CLASS, (name, limit, window_ms, burst, int(paused), tokens, now,
                                     *(extra[c] for c in adaptive_rules.SETTINGS)))


def upsert_concurrency_limit(
    conn: Connection, now: int, name: str, queue: str, max_concurrent: int,
    on_saturated: str,
) -> None:
    check_text("concurrency limit name", name)
    check_text("queue", queue)
    check_int("max_concurrent", max_concurrent, 1)
    if on_saturated not in SATURATION_STRATEGIES:
        raise InvalidInput(f"on_saturated must be one of {'|'.join(SATURATION_STRATEGIES)}")
    ensure_queue(conn, now, queue)
    conn.execute(UPSERT_CONCURRENCY_LIMIT, (name, queue, max_concurrent, on_saturated))


def delete_rate_class(conn: Connection, name: str, force: bool) -> int:
    """Remove a rate class unless jobs wait on it (available jobs naming it: the
    partial index jobs_rate_class_available_id counts them, never a scan); returns that
    count, and deletes only when it is 0 or `force`. Jobs that name a missing class are
    admitted without a budget."""
    if conn.execute(RATE_CLASS_EXISTS, (name,)).fetchone() is None:
        raise NotFound("rate class", name)
    waiting = conn.execute(RATE_CLASS_WAITING, (name,)).fetchone()[0]
    if waiting == 0 or force:
        conn.execute(DELETE_RATE_CLASS, (name,))
    return int(waiting)


def delete_concurrency_limit(conn: Connection, name: str, force: bool) -> tuple[int, str]:
    """Remove a concurrency limit unless its queue has jobs running or waiting under it
    (from the maintained queue_counts, not from jobs); returns (that count, its queue),
    and deletes only when the count is 0 or `force`."""
    row = conn.execute(CONCURRENCY_LIMIT_QUEUE, (name,)).fetchone()
    if row is None:
        raise NotFound("concurrency limit", name)
    queue = row[0]
    governed = conn.execute(QUEUE_GOVERNED, (queue,)).fetchone()[0]
    if governed == 0 or force:
        conn.execute(DELETE_CONCURRENCY_LIMIT, (name,))
    return int(governed), queue


# -- workers ------------------------------------------------------------------------

def heartbeat(
    conn: Connection, now: int, worker: WorkerBeat, running: Sequence[Claim]
) -> HeartbeatReply:
    worker_id = check_text("worker_id", worker.worker_id)
    started = now if worker.started_at_ms is None else int(worker.started_at_ms)
    conn.execute(UPSERT_WORKER, (
        worker_id, str(worker.host), int(worker.pid), json.dumps(list(worker.queues)),
        int(worker.concurrency), int(worker.inflight), int(worker.polls),
        int(worker.empty_polls), started, now, str(worker.status),
        None if worker.agent is None else str(worker.agent),
        None if worker.kinds is None else json.dumps(list(worker.kinds)),
    ))
    signal = conn.execute(SELECT_PENDING_SIGNAL, (worker_id,)).fetchone()
    if signal[0] is not None:
        conn.execute(CLEAR_PENDING_SIGNAL, (worker_id,))
    rows: dict[str, tuple] = {}
    ids = list({c.job.id for c in running})
    for i in range(0, len(ids), 500):  # one read per 500 jobs, not one per job
        chunk = ids[i : i + 500]
        rows.update((r[0], r[1:]) for r in conn.execute(
            SELECT_RUNNING_CHECK.format(marks=",".join("?" * len(chunk))), chunk))
    cancelled = []
    for claim in running:
        held = rows.get(claim.job.id)
        if held is None or held[0] != State.RUNNING.value or held[1] or held[2] != claim.fence:
            cancelled.append(claim)
    return HeartbeatReply(signal[0], tuple(cancelled))


def signal_worker(conn: Connection, worker_id: str, command: str | None) -> None:
    if command is not None and command not in WORKER_SIGNALS:
        raise InvalidInput(f"command must be one of {'|'.join(WORKER_SIGNALS)} or null")
    cur = conn.execute(SIGNAL_WORKER, (command, worker_id))
    if cur.rowcount == 0:
        raise NotFound("worker", worker_id)


# -- duty leases --------------------------------------------------------------------

def claim_duty(conn: Connection, now: int, name: str, holder: str, ttl_ms: int) -> bool:
    check_text("duty", name)
    check_text("holder", holder)
    check_int("ttl_ms", ttl_ms, 1)
    conn.execute(CLAIM_DUTY, (name, holder, now + ttl_ms, now))
    row = conn.execute(SELECT_DUTY_HOLDER, (name,)).fetchone()
    return row is not None and row[0] == holder


def renew_duty(conn: Connection, now: int, name: str, holder: str, ttl_ms: int) -> bool:
    """Extend only an unexpired lease of `holder`: one that lapsed may have been taken,
    run and released by another holder since, which claim_duty cannot tell."""
    check_text("duty", name)
    check_text("holder", holder)
    check_int("ttl_ms", ttl_ms, 1)
    return conn.execute(RENEW_DUTY, (now + ttl_ms, name, holder, now)).rowcount == 1


def release_duty(conn: Connection, name: str, holder: str) -> None:
    conn.execute(RELEASE_DUTY, (name, holder))
