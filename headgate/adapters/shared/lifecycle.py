"""Acks, leases and the sweeps that move jobs on store time.

Every state change here goes through `transition()` so the table in
core/transitions.json stays the one description of the lifecycle.
"""

from __future__ import annotations

from collections.abc import Sequence

from headgate.core import (
    AckRequest,
    Claim,
    GuardContext,
    LeaseLost,
    Outcome,
    State,
    retry_delay_ms,
    transition,
)
from headgate.core.adaptive import DEFAULT_THROTTLE_DELAY_MS
from headgate.core.envelope import MAX_PAYLOAD
from headgate.core.errors import InvalidInput
from headgate.core.transitions import DEFAULT_CRASH_LIMIT

from . import adaptive
from .conn import Connection
from .queries import fill, load
from .rows import append_error, bump_history, error_entry

Q = load(__name__)
SELECT_FOR_ACK = Q["select_for_ack"]
SELECT_FOR_ACKS = Q["select_for_acks"]
DELETE_JOBS = Q["delete_jobs"]
UPDATE_JOBS = Q["update_jobs"]
UPDATE_JOB = Q["update_job"]
COMPLETE_PLAIN = Q["complete_plain"]
DELETE_PLAIN = Q["delete_plain"]
RENEW = Q["renew"]
WRITE_PROGRESS = Q["write_progress"]
WRITE_OUTPUT = Q["write_output"]
SELECT_EXPIRED = Q["select_expired"]
PROMOTE_DUE = Q["promote_due"]
PROBE_DUE = Q["probe_due"]
DUE_QUEUES = Q["due_queues"]
EXPIRED_QUEUES = Q["expired_queues"]
EVICT = Q["evict"]
UPSERT_QUARANTINE = Q["upsert_quarantine"]
SELECT_RATE_LIMIT = Q["select_rate_limit"]
DRAIN_RATE_CLASS = Q["drain_rate_class"]
LOCK_ACK_CLASSES = Q["lock_ack_classes"]

MAX_PROGRESS_MESSAGE = 512
FAILED_OUTCOMES = {Outcome.RETRY, Outcome.SKIP, Outcome.UNDECODABLE}


def classes_written(acks: Sequence[AckRequest]) -> set[str]:
    """The rate classes whose row an ack of the batch writes whatever the class is: a
    throttle's cut and a rate-limited ack's drain. (A success writes its class only if
    the class is adaptive.)"""
    return {a.claim.job.rate_class for a in acks if a.claim.job.rate_class and (
        a.outcome == Outcome.THROTTLED.value
        or (a.outcome == Outcome.RATE_LIMITED.value and a.delay_ms))}


def _lock_classes(conn: Connection, acks: Sequence[AckRequest],
                  outcomes: Sequence[Outcome]) -> None:
    """Lock, in name order, every class row the batch may write before writing any:
    the order admission takes class rows in. Written ack by ack, two batches (or a batch
    and an admission) could meet two classes in opposite orders and deadlock. A batch
    that only raises classes takes nothing here: the raise locks its rows in name order
    itself, in one statement (adaptive.succeeded)."""
    written = classes_written(acks)
    if not written:
        return
    wanted = written | {a.claim.job.rate_class for a, o in zip(acks, outcomes, strict=True)
                        if a.claim.job.rate_class and o is Outcome.SUCCESS}
    sql = LOCK_ACK_CLASSES.format(  # type: ignore[attr-defined]
        marks=",".join("?" * len(wanted)), written=",".join("?" * len(written)),
        name_order=conn.dialect.binary_order("name"),  # type: ignore[attr-defined]
        for_update=conn.dialect.for_update)  # type: ignore[attr-defined]
    conn.execute(sql, (*sorted(wanted), *sorted(written))).fetchall()


def _locked_job(conn: Connection, job_id: str) -> tuple | None:
    sql = SELECT_FOR_ACK.format(for_update=conn.dialect.for_update)  # type: ignore[attr-defined]
    return conn.execute(sql, (job_id,)).fetchone()


def _lost_unless(row: tuple | None, claim: Claim) -> tuple:
    if row is None or row[0] != State.RUNNING.value or row[1] != claim.lease_id \
            or row[2] != claim.fence:
        raise LeaseLost(claim.job.id)
    return row


def ack(
    conn: Connection, now: int, claim: Claim, outcome: Outcome, error: str | None,
    delay_ms: int | None, result: bytes | None, result_schema_version: int,
    logs: Sequence[str], history: dict[str, dict[str, int]] | None = None,
) -> str:
    """Apply `outcome` to a claimed job; returns the queue for activity signalling.
    With `history`, the queue-history counts are added there for the caller to write
    once per transaction instead of once per job."""
    outcome = _checked_outcome(outcome, delay_ms, result)
    row = _lost_unless(_locked_job(conn, claim.job.id), claim)
    sets, queue, delta = _plan_ack(conn, now, row, outcome, error, delay_ms, result,
                                   result_schema_version, logs)
    _apply_planned(conn, [claim.job.id], sets)
    if history is None:
        bump_history(conn, now, {queue: delta})
    else:
        _add_counts(history, queue, delta)
    return queue


def ack_many(
    conn: Connection, now: int, acks: Sequence[AckRequest],
    history: dict[str, dict[str, int]],
) -> tuple[list[str], set[str]]:
    """Apply many acks with one read and one write per distinct change.

    The rows are read (and on PostgreSQL locked) together in id order; every ack is
    still checked against its own row's state, lease id and fence, so a lost lease is
    reported exactly. Acks whose planned change is identical — the steady state: many
    plain successes — share one UPDATE. On an engine with serial writes a batch of
    plain successes skips the read (ack_plain_successes). Returns (lost job ids, queues
    to wake)."""
    if conn.dialect.serial_writes and _all_plain_successes(acks):
        return ack_plain_successes(conn, now, acks, history), set()
    ordered = sorted(acks, key=lambda a: a.claim.job.id)
    outcomes = [_checked_outcome(a.outcome, a.delay_ms, a.result) for a in ordered]
    if not conn.dialect.serial_writes:
        _lock_classes(conn, ordered, outcomes)
    rows = _locked_jobs(conn, sorted({a.claim.job.id for a in ordered}))
    lost: list[str] = []
    wake: set[str] = set()
    groups: dict[tuple | None, list[str]] = {}
    for a, outcome in zip(ordered, outcomes, strict=True):
        job_id = a.claim.job.id
        try:
            row = _lost_unless(rows.get(job_id), a.claim)
        except LeaseLost:
            lost.append(job_id)
            continue
        del rows[job_id]  # a later ack of the same job in the batch finds it acked
        sets, queue, delta = _plan_ack(conn, now, row, outcome, a.error, a.delay_ms,
                                       a.result, a.result_schema_version, a.logs)
        key = None if sets is None else tuple(sets.items())
        groups.setdefault(key, []).append(job_id)
        _add_counts(history, queue, delta)
        if outcome in (Outcome.RATE_LIMITED, Outcome.SNOOZE):
            wake.add(queue)
    for key, ids in groups.items():
        _apply_planned(conn, ids, None if key is None else dict(key))
    return lost, wake


# What the transition table does with a success from running: the fast path below
# writes exactly that, and is only taken while the table says no more than this.
_KEPT = transition(State.RUNNING, Outcome.SUCCESS.value, GuardContext(retention_ms=1))
_DROPPED = transition(State.RUNNING, Outcome.SUCCESS.value, GuardContext(retention_ms=0))
SUCCESS_IS_PLAIN = (_KEPT.target is State.COMPLETED and _DROPPED.target is State.DELETED
                    and not _KEPT.effects and not _DROPPED.effects
                    and {_KEPT.guard, _DROPPED.guard} == {"retention_positive",
                                                         "retention_zero"})


def plain_success(ack: AckRequest) -> bool:
    """A success with nothing to record but itself (and perhaps its result): no error,
    log lines or delay. PostgreSQL's function applies these itself, with results;
    SQLite's ack_plain_successes without."""
    return (ack.outcome == Outcome.SUCCESS.value and ack.error is None and not ack.logs
            and ack.delay_ms is None)


def _all_plain_successes(acks: Sequence[AckRequest]) -> bool:
    """Plain successes without a result, each job once."""
    return SUCCESS_IS_PLAIN and len({a.claim.job.id for a in acks}) == len(acks) and all(
        plain_success(a) and a.result is None for a in acks)


def ack_plain_successes(conn: Connection, now: int, acks: Sequence[AckRequest],
                        history: dict[str, dict[str, int]]) -> list[str]:
    """A worker's steady state without reading the rows first: one UPDATE completes
    the acks whose rows are still theirs (and a DELETE, when some are left, takes those
    with retention 0). For engines whose writes are serial: the statements change rows
    in scan order. Returns the lost job ids."""
    lost: list[str] = []
    for i in range(0, len(acks), 500):  # four variables an ack, far below SQLite's limit
        chunk = acks[i : i + 500]
        ids = [a.claim.job.id for a in chunk]
        marks = ",".join("?" * len(ids))
        rows = ",".join(["(?, ?, ?)"] * len(chunk))
        keys = [v for a in chunk for v in (a.claim.job.id, a.claim.lease_id, a.claim.fence)]
        done = conn.execute(COMPLETE_PLAIN.format(marks=marks, rows=rows),
                            (_KEPT.target.value, now, now, *ids, *keys)).fetchall()
        if len(done) < len(ids):
            done += conn.execute(DELETE_PLAIN.format(marks=marks, rows=rows),
                                 (*ids, *keys)).fetchall()
        for _, queue in done:
            _add_counts(history, queue, {"completed": 1})
        applied = {job_id for job_id, _ in done}
        lost += (job_id for job_id in ids if job_id not in applied)
    return sorted(lost)


def _checked_outcome(outcome: Outcome | str, delay_ms: int | None,
                     result: bytes | None) -> Outcome:
    outcome = Outcome(outcome)
    if delay_ms is not None and (isinstance(delay_ms, bool) or not isinstance(delay_ms, int)
                                 or delay_ms < 0):
        raise InvalidInput("delay_ms must be an integer >= 0")
    if result is not None and len(result) > MAX_PAYLOAD:
        raise InvalidInput(f"result must be at most {MAX_PAYLOAD} bytes")
    return outcome


def _locked_jobs(conn: Connection, ids: list[str]) -> dict[str, tuple]:
    found: dict[str, tuple] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        sql = SELECT_FOR_ACKS.format(marks=",".join("?" * len(chunk)),
                                     for_update=conn.dialect.for_update)  # type: ignore[attr-defined]
        for row in conn.execute(sql, chunk):
            found[row[0]] = tuple(row[1:])
    return found


def _plan_ack(
    conn: Connection, now: int, row: tuple, outcome: Outcome, error: str | None,
    delay_ms: int | None, result: bytes | None, result_schema_version: int,
    logs: Sequence[str],
) -> tuple[dict[str, object] | None, str, dict[str, int]]:
    """The column changes for one ack (None: delete the row), its queue and its
    history counts. Only a rate-limited ack with a delay and a throttled ack write here
    (their class)."""
    _, _, _, attempt, max_attempts, crash, retention, queue, rate_name, errors, worker = row
    rule = transition(State.RUNNING, outcome.value, GuardContext(
        attempt=attempt, max_attempts=max_attempts, crash_attempt=crash,
        retention_ms=retention, now_ms=now,
    ))
    new_attempt = attempt + 1 if "attempt" in rule.effects else attempt
    if error is not None or logs or outcome in FAILED_OUTCOMES:
        errors = append_error(errors, error_entry(
            new_attempt if "attempt" in rule.effects else attempt, now, error, logs, worker,
            outcome.value,
        ))
    delta = {"completed": 1} if outcome is Outcome.SUCCESS else (
        {"failed": 1} if outcome in FAILED_OUTCOMES else {})
    target = rule.target
    if target is State.DELETED:
        return None, queue, delta
    sets: dict[str, object] = {
        "state": target.value, "attempt": new_attempt, "lease_id": None,
        "lease_expires_at_ms": None, "errors": errors,
    }
    if target is State.RETRYABLE:
        wait = delay_ms if delay_ms is not None else retry_delay_ms(new_attempt)
        sets["scheduled_at_ms"] = now + wait
    elif target is State.SCHEDULED and outcome is Outcome.THROTTLED:
        window_ms = adaptive.throttled(conn, now, rate_name) if rate_name else None
        wait = delay_ms if delay_ms is not None else (window_ms or DEFAULT_THROTTLE_DELAY_MS)
        sets["scheduled_at_ms"] = now + wait
    elif target is State.SCHEDULED:
        sets["scheduled_at_ms"] = now + (delay_ms or 0)
    elif target is State.AVAILABLE and delay_ms and rate_name:
        _drain_rate_class(conn, now, rate_name, delay_ms)
    if target in (State.COMPLETED, State.ARCHIVED, State.UNDECODABLE):
        sets["finalized_at_ms"] = now
        sets["expires_at_ms"] = now + retention
    if outcome is Outcome.SUCCESS and result is not None:
        sets["result"] = bytes(result)
        sets["result_schema_version"] = result_schema_version
    return sets, queue, delta


def succeeded_classes(acks: Sequence[AckRequest], lost: Sequence[str]) -> set[str]:
    """The rate classes of the successes among `acks` that were applied: what an
    adaptive class's increase (adaptive.succeeded) hears of."""
    gone = set(lost)
    return {a.claim.job.rate_class for a in acks
            if a.claim.job.rate_class and a.outcome == Outcome.SUCCESS.value
            and a.claim.job.id not in gone}


def _apply_planned(conn: Connection, ids: list[str], sets: dict[str, object] | None) -> None:
    marks = ",".join("?" * len(ids))
    if sets is None:
        conn.execute(DELETE_JOBS.format(marks=marks), ids)
        return
    assignments = ", ".join(f"{column} = ?" for column in sets)
    conn.execute(fill(UPDATE_JOBS, assignments=assignments, marks=marks),
                 (*sets.values(), *ids))


def _add_counts(history: dict[str, dict[str, int]], queue: str, delta: dict[str, int]) -> None:
    counts = history.setdefault(queue, {})
    for key, n in delta.items():
        counts[key] = counts.get(key, 0) + n


def _drain_rate_class(conn: Connection, now: int, name: str, delay_ms: int) -> None:
    """A handler that hit an external rate limit empties its class for `delay_ms`, so the
    whole fleet backs off, not just this worker."""
    row = conn.execute(SELECT_RATE_LIMIT, (name,)).fetchone()
    if row is not None:
        limit, window_ms = row
        conn.execute(DRAIN_RATE_CLASS, (-(delay_ms * limit / window_ms), now, name))


def _update(conn: Connection, job_id: str, sets: dict[str, object]) -> None:
    assignments = ", ".join(f"{column} = ?" for column in sets)
    conn.execute(fill(UPDATE_JOB, assignments=assignments), (*sets.values(), job_id))


def lock_job_queues(conn: Connection, sql: str, params: tuple) -> None:
    """PostgreSQL: take the advisory locks of the queues `sql` names, before any row.

    Every transaction that moves jobs between states also updates the per-queue counter
    rows (triggers) and history rows, one statement at a time, so two of them could
    take those hot rows in opposite orders and deadlock. Taking the queues' admission
    locks first, in sorted order (as admit does), orders them instead."""
    if not conn.dialect.serial_writes:
        conn.dialect.lock_queues(conn, [row[0] for row in conn.execute(sql, params)])


def renew(conn: Connection, now: int, claims: Sequence[Claim], lease_ms: int) -> list[Claim]:
    lost = []
    # Rows in id order, as every multi-job writer takes them: no lock-order deadlock.
    for claim in sorted(claims, key=lambda c: c.job.id):
        cur = conn.execute(RENEW, (now + lease_ms, claim.job.id, claim.lease_id, claim.fence))
        if cur.rowcount == 0:
            lost.append(claim)
    return lost


def release(conn: Connection, now: int, claims: Sequence[Claim]) -> tuple[int, set[str]]:
    """Hand claims back without charging an attempt: the table's rate_limited row
    (running → available, neither counter moves). Returns how many were still held."""
    released = 0
    queues: set[str] = set()
    rule = transition(State.RUNNING, Outcome.RATE_LIMITED.value)
    conn.dialect.lock_queues(conn, sorted({c.job.queue for c in claims}))
    for claim in sorted(claims, key=lambda c: c.job.id):
        try:
            row = _lost_unless(_locked_job(conn, claim.job.id), claim)
        except LeaseLost:
            continue
        _update(conn, claim.job.id, {
            "state": rule.target.value, "lease_id": None, "lease_expires_at_ms": None,
        })
        queues.add(row[7])
        released += 1
    return released, queues


def write_progress(
    conn: Connection, now: int, claim: Claim, current: int, total: int,
    message: str | None,
) -> None:
    for name, value in (("current", current), ("total", total)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(f"progress {name} must be an integer >= 0")
    if message is not None and len(message.encode()) > MAX_PROGRESS_MESSAGE:
        raise InvalidInput(f"progress message must be at most {MAX_PROGRESS_MESSAGE} bytes")
    cur = conn.execute(WRITE_PROGRESS, (
        current, total, message, now, claim.job.id, claim.lease_id, claim.fence,
    ))
    if cur.rowcount == 0:
        raise LeaseLost(claim.job.id)


def write_output(
    conn: Connection, now: int, claim: Claim, data: bytes, schema_version: int
) -> None:
    if not isinstance(data, bytes | bytearray) or len(data) > MAX_PAYLOAD:
        raise InvalidInput(f"output must be bytes of at most {MAX_PAYLOAD}")
    cur = conn.execute(WRITE_OUTPUT, (
        bytes(data), schema_version, now, claim.job.id, claim.lease_id, claim.fence,
    ))
    if cur.rowcount == 0:
        raise LeaseLost(claim.job.id)


def reclaim_expired(
    conn: Connection, now: int, limit: int, crash_limit: int = DEFAULT_CRASH_LIMIT,
    since: int = 0,
) -> tuple[int, set[str]]:
    """lease_lost for every lease that expired from `since` to `now`: crash accounting,
    quarantine at the limit. Returns how many leases expired and the queues they were
    in."""
    queues: set[str] = set()
    lock_job_queues(conn, EXPIRED_QUEUES, (since, now, limit))
    sql = SELECT_EXPIRED.format(skip_locked=conn.dialect.skip_locked)
    rows = conn.execute(sql, (since, now, limit)).fetchall()
    for job_id, crash, fp, kind, worker, errors, queue, _retention, fence in rows:
        rule = transition(State.RUNNING, "lease_lost", GuardContext(
            crash_attempt=crash, crash_limit=crash_limit, now_ms=now,
        ))
        crash += 1
        message = f"lease lost: worker {worker} stopped renewing (crash {crash} of {crash_limit})"
        sets: dict[str, object] = {
            "state": rule.target.value, "crash_attempt": crash, "lease_id": None,
            "lease_expires_at_ms": None,
            "errors": append_error(errors, error_entry(
                fence, now, message, (), worker, "lease_lost")),
        }
        if rule.target is State.RETRYABLE:
            sets["scheduled_at_ms"] = now + min(retry_delay_ms(crash), 30_000)
        else:
            sets["finalized_at_ms"] = now
            conn.execute(UPSERT_QUARANTINE, (
                fp, kind, crash, now, f"worker lost the lease {crash} times",
            ))
        _update(conn, job_id, sets)
        bump_history(conn, now, {queue: {"failed": 1}})
        queues.add(queue)
    return len(rows), queues


def promote_due(conn: Connection, now: int, limit: int,
                queues: Sequence[str] | None = None, *,
                probed: bool = False) -> tuple[int, set[str]]:
    """Due scheduled/retryable jobs → available: of `queues` only (admit, which holds
    their locks already), or of any queue (the promoter duty, which locks them first).
    `probed`: the caller already saw due jobs in the same transaction."""
    names = list(queues) if queues is not None else []
    in_queues = f" AND queue IN ({','.join('?' * len(names))})" if names else ""
    # The probe is an index peek; the UPDATE costs far more even when it matches nothing,
    # and admit runs this on every call.
    if not probed and conn.execute(
        PROBE_DUE.format(in_queues=in_queues), (now, *names)
    ).fetchone() is None:
        return 0, set()
    if queues is None:
        lock_job_queues(conn, DUE_QUEUES, (now, limit))
    sql = PROMOTE_DUE.format(in_queues=in_queues, skip_locked=conn.dialect.skip_locked)
    rows = conn.execute(sql, (now, *names, limit, now)).fetchall()
    return len(rows), {row[0] for row in rows}


def evict_retained(conn: Connection, now: int, limit: int) -> int:
    return conn.execute(EVICT, (now, limit)).rowcount
