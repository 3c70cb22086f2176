"""The admission gate (docs/ARCHITECTURE.md): one IMMEDIATE transaction decides what a
worker may run.

Order of a call: promote what is due; split capacity between the caller's unpaused
queues by weight; within a queue, draw from partitions by deficit round robin; for each
candidate check sticky worker, quarantine, rate class and concurrency ceiling; claim the
survivors with one lease id. Candidates are scanned by light columns first and only the
claimed rows are read in full, so a blocked backlog never costs payload reads.

This is SQLite's admission. On PostgreSQL the same decision is the server-side function
headgate_admit_v3() (headgate/db/postgres/functions/admit.sql, called from
headgate/adapters/postgres/admission.py): a policy change must be made in both, and
tests/store/test_postgres_server_side.py replays scenarios through both and compares them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from headgate.adapters.shared.admission_limits import (
    MAX_SCAN_PER_PARTITION,
    PROMOTE_PER_ADMIT,
    SCAN_BATCH_EXTRA,
    RateBucket,
)
from headgate.adapters.shared.conn import Connection
from headgate.adapters.shared.lifecycle import promote_due
from headgate.adapters.shared.queries import fill, load
from headgate.adapters.shared.rows import (
    JOB_COLUMNS_WITH_PAYLOAD,
    append_error,
    bump_history,
    error_entry,
    row_to_job,
)
from headgate.core import Claim, Explanation, State
from headgate.core.ids import new_lease_id

Q = load(__name__)
SELECT_QUEUES = Q["select_queues"]
COUNT_PARTITIONS = Q["count_partitions"]
SELECT_PARTITIONS = Q["select_partitions"]
SELECT_PARTITIONS_AFTER = Q["select_partitions_after"]
SELECT_CANDIDATES = Q["select_candidates"]
SELECT_CANDIDATES_AFTER = Q["select_candidates_after"]
SELECT_RATE_CLASS = Q["select_rate_class"]
UPDATE_RATE_TOKENS = Q["update_rate_tokens"]
SELECT_LIMITS = Q["select_limits"]
SELECT_QUARANTINE = Q["select_quarantine"]
CLAIM_JOBS = fill(Q["claim_jobs"], columns=JOB_COLUMNS_WITH_PAYLOAD)
UPDATE_DEFICIT = Q["update_deficit"]
DROP_IDLE_PARTITIONS = Q["drop_idle_partitions"]
UPDATE_RR_CURSOR = Q["update_rr_cursor"]
SELECT_OLDEST_RUNNING = Q["select_oldest_running"]
CANCEL_JOB = Q["cancel_job"]
DISCARD_JOB = Q["discard_job"]
SELECT_ERRORS = Q["select_errors"]
EXPLAIN_JOB = Q["explain_job"]
QUEUE_PAUSED = Q["queue_paused"]
PARTITION_COUNTS = Q["partition_counts"]
COUNT_AHEAD = Q["count_ahead"]


@dataclass(slots=True)
class Gate:
    """Policy state for one admit call: loaded lazily, written back once."""

    conn: Connection
    now: int
    worker_id: str
    rates: dict[str, RateBucket | None] = field(default_factory=dict)
    blocked_rates: set[str] = field(default_factory=set)
    limits: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)
    quarantined: dict[str, bool] = field(default_factory=dict)
    any_quarantine: bool = False
    rejections: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    claimed: list[str] = field(default_factory=list)
    claimed_set: set[str] = field(default_factory=set)
    # Fairness state, written back after the claims so every transaction takes the
    # counter rows (claims' triggers) before the partition rows: one lock order.
    deficits: dict[tuple[str, str], int] = field(default_factory=dict)
    loaded_deficits: dict[tuple[str, str], int] = field(default_factory=dict)
    cursors: dict[str, str] = field(default_factory=dict)
    # Claims and cancellations this call made, not yet in the partition counters.
    running_delta: dict[tuple[str, str], int] = field(default_factory=dict)
    # Per queue, its partitions with waiting jobs counted up to the capacity, for its
    # first visit (taken once: a later visit counts again, after what this call did).
    waiting: dict[str, int] = field(default_factory=dict)

    def rate(self, name: str) -> RateBucket | None:
        if name not in self.rates:
            sql = SELECT_RATE_CLASS.format(for_update=self.conn.dialect.for_update)
            row = self.conn.execute(sql, (name,)).fetchone()
            self.rates[name] = RateBucket.load(row, self.now) if row else None
        return self.rates[name]

    def is_quarantined(self, fp: str) -> bool:
        if not self.any_quarantine:
            return False
        if fp not in self.quarantined:
            self.quarantined[fp] = (
                self.conn.execute(SELECT_QUARANTINE, (fp,)).fetchone() is not None
            )
        return self.quarantined[fp]

    def queue_limits(self, queue: str) -> list[tuple[str, int, str]]:
        if queue not in self.limits:
            self.limits[queue] = self.conn.execute(SELECT_LIMITS, (queue,)).fetchall()
        return self.limits[queue]

    def reject(self, queue: str, policy: str) -> None:
        self.rejections[queue][f"rejected_{policy}"] += 1


def admit(
    conn: Connection, now: int, worker_id: str, queues: Sequence[str],
    capacity: int, lease_ms: int, quantum: int | None,
) -> list[Claim]:
    names = list(dict.fromkeys(queues))
    conn.dialect.lock_queues(conn, names)  # first: see lifecycle.lock_job_queues
    marks = ",".join("?" * len(names))
    rows = conn.execute(SELECT_QUEUES.format(marks=marks),
                        (now, *names, capacity, *names)).fetchall()
    # Promotion changes no queue, ceiling or quarantine row, so reading those first is
    # the same as reading them after it; it does change partitions' waiting counts.
    promoted = not rows or rows[0][6]
    if promoted:
        promote_due(conn, now, PROMOTE_PER_ADMIT, names, probed=bool(rows))
    order = {name: i for i, name in enumerate(names)}
    active = sorted((r for r in rows if not r[2]), key=lambda r: order[r[0]])
    if not active or capacity == 0:
        return []
    gate = Gate(conn, now, worker_id)
    gate.any_quarantine = bool(rows[0][5])
    gate.limits = {r[0]: [] for r in rows if not r[4]}
    if not promoted:
        gate.waiting = {r[0]: r[7] for r in rows}
    lease_id = new_lease_id()
    expires = now + lease_ms

    remaining = capacity
    hungry: list[tuple] = []
    for row, share in zip(active, _weighted_shares(capacity, [r[1] for r in active]), strict=True):
        gate.cursors[row[0]] = row[3]
        got = _admit_queue(gate, row[0], min(share, remaining), quantum)
        remaining -= got
        if got == share:  # a share of 0 still takes what others leave
            hungry.append(row)
    # Work-conserving: what a queue left unused goes to queues that still had work.
    for row in hungry:
        if remaining <= 0:
            break
        remaining -= _admit_queue(gate, row[0], remaining, quantum)

    jobs = {}
    for i in range(0, len(gate.claimed), 500):
        chunk = gate.claimed[i : i + 500]
        sql = CLAIM_JOBS.format(marks=",".join("?" * len(chunk)))
        for r in conn.execute(sql, (lease_id, expires, worker_id, now, *chunk)).fetchall():
            job = row_to_job(r)
            # A row an operator changed meanwhile was not claimed: trust the lease id.
            if job.lease_id == lease_id:
                jobs[job.id] = job
    _write_back(gate, rows)
    return [Claim(jobs[i], lease_id, jobs[i].fence, expires) for i in gate.claimed if i in jobs]


def _write_back(gate: Gate, queue_rows: list[tuple]) -> None:
    """Persist fairness state, tokens and rejection counts, only what changed."""
    conn, now = gate.conn, gate.now
    for (queue, key), deficit in sorted(gate.deficits.items()):
        if gate.loaded_deficits.get((queue, key)) != deficit:
            conn.execute(UPDATE_DEFICIT, (deficit, queue, key))
    for name, _, _, cursor, *_ in queue_rows:
        if name in gate.cursors and gate.cursors[name] != cursor:
            conn.execute(UPDATE_RR_CURSOR, (gate.cursors[name], name))
    for name, bucket in sorted(gate.rates.items()):
        if bucket is not None and bucket.dirty:
            conn.execute(UPDATE_RATE_TOKENS, (bucket.tokens, now, name))
    bump_history(conn, now, gate.rejections)


def drop_idle_partitions(conn: Connection, limit: int) -> int:
    """Delete up to `limit` idle partition rows (none waiting or running, no credit), so
    the table holds the partitions in use rather than every one a queue ever had."""
    return int(conn.execute(DROP_IDLE_PARTITIONS, (limit,)).rowcount)


def _weighted_shares(capacity: int, weights: list[int]) -> list[int]:
    total = sum(weights)
    raw = [capacity * w / total for w in weights]
    shares = [math.floor(x) for x in raw]
    leftover = capacity - sum(shares)
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - shares[i], reverse=True)[:leftover]:
        shares[i] += 1
    return shares


def _admit_queue(gate: Gate, queue: str, want: int, quantum: int | None) -> int:
    """Deficit round robin over the queue's partitions; returns how many were claimed."""
    if want <= 0:
        return 0
    conn = gate.conn
    # With as many partitions as wanted jobs or more the quantum is 1, whatever their number.
    counted = gate.waiting.pop(queue, None)
    if counted is None:
        (count,) = conn.execute(COUNT_PARTITIONS, (queue, want)).fetchone()
    else:
        count = min(counted, want)
    if not count:
        return 0
    rr_cursor = gate.cursors[queue]
    q = quantum or max(1, math.ceil(want / count))
    # A queue may have thousands of partitions and an admit visits a few: the first round
    # reads them lazily in rotation order (a page covers the visits that fill `want`
    # when each partition gives its quantum), a partition's deficit and running count
    # are taken on its first visit, and only visited ones are written back. Fewer
    # partitions than wanted jobs are all of them: one read, rotated here.
    if count < want:
        every = conn.execute(SELECT_PARTITIONS, (queue, count)).fetchall()
        first_round: Iterable[tuple] = (
            [p for p in every if p[0] > rr_cursor] + [p for p in every if p[0] <= rr_cursor])
    else:
        first_round = _rotation(conn, queue, rr_cursor, -(-want // q) + 4)
    deficits: dict[str, int] = {}
    running: dict[str, int] = {}
    base_running: dict[str, int] = {}
    active: Iterable[tuple] = first_round
    remaining, last_served = want, rr_cursor
    while remaining > 0:
        still = []
        for part in active:
            key = part[0]
            if key not in deficits:
                gate.loaded_deficits.setdefault((queue, key), part[1])
                deficits[key] = gate.deficits.get((queue, key), part[1])
                base_running[key] = part[2]
                running[key] = part[2] + gate.running_delta.get((queue, key), 0)
            deficits[key] += q
            take = min(deficits[key], remaining)
            got = _take(gate, queue, key, take, running)
            deficits[key] -= got
            remaining -= got
            if got:
                last_served = key
            if got < take:
                deficits[key] = 0  # drained or blocked: DRR forgets its credit
            else:
                still.append(part)
            if remaining <= 0:
                break  # the round ends here, and so does the loop
        if not still:
            break
        active = still
    for key, deficit in deficits.items():
        gate.deficits[(queue, key)] = deficit
    for key, n in running.items():
        gate.running_delta[(queue, key)] = n - base_running[key]
    gate.cursors[queue] = last_served
    return want - remaining


def _rotation(conn: Connection, queue: str, cursor: str, page: int) -> Iterator[tuple]:
    """The queue's partitions with waiting jobs, those after `cursor` first, then from
    the start up to it (the one served last comes last: ties rotate between calls)."""
    after: str | None = cursor
    while after is not None:
        rows = conn.execute(SELECT_PARTITIONS_AFTER, (queue, after, page)).fetchall()
        yield from rows
        after = rows[-1][0] if len(rows) == page else None
    rows = conn.execute(SELECT_PARTITIONS, (queue, page)).fetchall()
    while rows:
        for row in rows:
            if row[0] > cursor:
                return
            yield row
        rows = (conn.execute(SELECT_PARTITIONS_AFTER, (queue, rows[-1][0], page)).fetchall()
                if len(rows) == page else [])


def _take(gate: Gate, queue: str, partition: str, take: int, running: dict[str, int]) -> int:
    conn = gate.conn
    got = scanned = 0
    after: tuple[int, int] | None = None
    limits = gate.queue_limits(queue)
    while got < take and scanned < MAX_SCAN_PER_PARTITION:
        # First what is wanted, then room to skip what a policy turns away: on
        # PostgreSQL every candidate read is locked (FOR UPDATE, a WAL record per row),
        # and PostgreSQL's function sizes its batches the same way.
        batch = take - got + (SCAN_BATCH_EXTRA if after is not None else 0)
        lock = conn.dialect.skip_locked
        if after is None:
            rows = conn.execute(
                SELECT_CANDIDATES.format(skip_locked=lock), (queue, partition, batch)
            ).fetchall()
        else:
            rows = conn.execute(
                SELECT_CANDIDATES_AFTER.format(skip_locked=lock),
                (queue, partition, after[0], after[0], after[1], batch),
            ).fetchall()
        for rowid, job_id, priority, fp, rate_name, weight, sticky in rows:
            scanned += 1
            after = (priority, rowid)
            if job_id in gate.claimed_set:
                continue
            if sticky and sticky != gate.worker_id:
                continue
            if gate.is_quarantined(fp):
                gate.reject(queue, "quarantine")
                continue
            bucket = gate.rate(rate_name) if rate_name else None
            if bucket is not None and (
                rate_name in gate.blocked_rates or bucket.paused or bucket.tokens < weight
            ):
                gate.blocked_rates.add(rate_name)
                gate.reject(queue, "rate_class")
                continue
            verdict = _ceiling(gate, queue, partition, job_id, limits, running)
            if verdict == "reject":
                gate.reject(queue, "concurrency_limit")
                return got
            if verdict == "gone":
                gate.reject(queue, "concurrency_limit")
                continue
            if bucket is not None:
                bucket.tokens -= weight
                bucket.dirty = True
            gate.claimed.append(job_id)
            gate.claimed_set.add(job_id)
            running[partition] = running.get(partition, 0) + 1
            got += 1
            if got >= take:
                return got
        if len(rows) < batch:
            break
    return got


def _ceiling(
    gate: Gate, queue: str, partition: str, job_id: str,
    limits: list[tuple[str, int, str]], running: dict[str, int],
) -> str:
    """'ok' to admit, 'reject' to leave it waiting, 'gone' when the job was removed."""
    for name, max_concurrent, strategy in limits:
        if running.get(partition, 0) < max_concurrent:
            continue
        conn, now = gate.conn, gate.now
        if strategy == "discard":
            conn.execute(DISCARD_JOB, (job_id,))
            return "gone"
        if strategy == "cancel_incoming":
            errors = conn.execute(SELECT_ERRORS, (job_id,)).fetchone()[0]
            reason = f"cancelled: concurrency limit {name} saturated ({max_concurrent} running)"
            entry = error_entry(0, now, reason, (), None, "cancel_incoming")
            conn.execute(CANCEL_JOB, (now, now, append_error(errors, entry), job_id))
            return "gone"
        if strategy == "cancel_running":
            oldest = conn.execute(
                SELECT_OLDEST_RUNNING.format(for_update=conn.dialect.for_update),
                (queue, partition),
            ).fetchone()
            if oldest is None:
                return "reject"
            reason = f"cancelled to make room: concurrency limit {name} ({max_concurrent})"
            entry = error_entry(0, now, reason, (), None, "cancel_running")
            conn.execute(CANCEL_JOB, (now, now, append_error(oldest[1], entry), oldest[0]))
            running[partition] -= 1
            continue
        return "reject"
    return "ok"


def explain(conn: Connection, now: int, job_id: str) -> Explanation | None:
    """SQLite's explain_admission, beside the admission it explains. PostgreSQL's store
    asks its own admission instead (headgate_explain_v1)."""
    row = conn.execute(EXPLAIN_JOB, (job_id,)).fetchone()
    if row is None:
        return None
    state, queue, partition, priority, rowid, fp, rate_name, weight, due, sticky = row
    state = State(state)
    if state in (State.SCHEDULED, State.RETRYABLE):
        wait = max(0, due - now)
        return Explanation(False, "schedule", {"state": state.value, "scheduled_at_ms": due,
                                               "due_in_ms": wait}, wait)
    if state is not State.AVAILABLE:
        return Explanation(False, None, {"state": state.value}, None)
    detail: dict = {"state": state.value, "queue": queue, "partition_key": partition}
    paused = conn.execute(QUEUE_PAUSED, (queue,)).fetchone()
    if paused and paused[0]:
        return Explanation(False, "queue_paused", {**detail, "paused": True}, None)
    crash = conn.execute(SELECT_QUARANTINE, (fp,)).fetchone()
    if crash is not None:
        return Explanation(False, "quarantine",
                           {**detail, "fingerprint": fp, "crash_count": crash[0]}, None)
    if rate_name:
        rate_row = conn.execute(SELECT_RATE_CLASS.format(for_update=""), (rate_name,)).fetchone()
        if rate_row is not None:
            bucket = RateBucket.load(rate_row, now)
            numbers = {
                "rate_class": rate_name, "tokens_available": round(bucket.tokens, 3),
                "weight": weight, "limit": bucket.limit, "window_ms": bucket.window_ms,
                "burst": bucket.burst, "paused": bucket.paused,
            }
            if bucket.paused:
                return Explanation(False, "rate_class", {**detail, **numbers}, None)
            if weight > bucket.burst:
                # The bucket never holds that many tokens: no wait would help.
                return Explanation(False, "rate_class",
                                   {**detail, **numbers, "weight_exceeds_burst": True}, None)
            if bucket.tokens < weight:
                wait = bucket.refill_in_ms(weight)
                return Explanation(False, "rate_class",
                                   {**detail, **numbers, "refill_in_ms": wait}, wait)
    part = conn.execute(PARTITION_COUNTS, (queue, partition)).fetchone()
    running, waiting = part if part else (0, 0)
    for name, max_concurrent, strategy in conn.execute(SELECT_LIMITS, (queue,)):
        if running >= max_concurrent:
            return Explanation(False, "concurrency_limit", {
                **detail, "limit": name, "running": running, "max_concurrent": max_concurrent,
                "on_saturated": strategy,
            }, None)
    ahead = conn.execute(COUNT_AHEAD, (queue, partition, priority, priority, rowid)
                         ).fetchone()[0]
    if sticky:
        detail["sticky_worker"] = sticky
    if ahead:
        return Explanation(False, "fairness", {
            **detail, "position_in_partition": ahead, "partition_waiting": waiting,
            "partition_running": running,
        }, None)
    return Explanation(True, None, {**detail, "position_in_partition": 0}, 0)
