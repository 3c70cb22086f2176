"""PostgreSQL's admission gate: one call of the server-side function headgate_admit_v3()
(headgate/db/postgres/functions/admit.sql), with a worker's plain successful acks in the
same statement.

Why a function: evaluated from Python, an admit is ~10 statements and an ack+admit
~15–20, each a network round trip while the queues' admission locks are held; py-spy
put about half of a draining worker's time in psycopg waiting. The function is the same
decision as headgate/adapters/sqlite/admission.py (which SQLite keeps): PostgreSQL's
admission lives in the SQL file, SQLite's in that module, and a change to the policy
must be made in both (a differential test holds the function, its early exit for a pure
admit included, to the shared decision). explain_admission is a dry run of the function's
own checks (headgate_explain_v1, functions/explain.sql), not SQLite's Python.

Acks the function applies itself are plain successes (no error, no logs, no delay),
written by the same UPDATE as the claims; any other outcome in a batch sends the whole
batch through the shared lifecycle first, in the same transaction, and the function then
only admits; a batch that writes rate-class rows (a throttle, a rate-limited ack's drain,
an adaptive class's raise) commits before the admission instead, so that a transaction
never takes class rows in two passes of name order. Every call of the function is one
statement in autocommit: no BEGIN or COMMIT round trip.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from headgate.adapters.shared import adaptive
from headgate.adapters.shared.admission_limits import (
    MAX_SCAN_PER_PARTITION,
    PROMOTE_PER_ADMIT,
    SCAN_BATCH_EXTRA,
    validate_admit_args,
)
from headgate.adapters.shared.lifecycle import classes_written, plain_success, succeeded_classes
from headgate.adapters.shared.queries import fill, load
from headgate.adapters.shared.rows import row_to_job
from headgate.core import AckRequest, Claim, Explanation, StoreUnavailable
from headgate.core.envelope import MAX_PAYLOAD
from headgate.core.ids import new_lease_id

from .announce import FinishedAnnouncer
from .connection import PgConnection, PgDatabase, again_after_deadlock, store_time

log = logging.getLogger(__name__)

PLAIN_RETRY_S = 1.0
# How long the set of adaptive rate classes read for plain acks is trusted.
ADAPTIVE_RECHECK_S = 1.0
# The lost id of the early exit's marker row: it declined, the policy block decided.
DECLINED = ""
MAX_POLICY_BOUND = 1024
Q = load(__name__)
ADMIT = fill(Q["admit"], max_scan=str(MAX_SCAN_PER_PARTITION), scan_extra=str(SCAN_BATCH_EXTRA),
             promote_limit=str(PROMOTE_PER_ADMIT))
EXPLAIN = Q["explain"]
LOCK_COUNTERS = Q["lock_counters"]


@dataclass(frozen=True, slots=True)
class PlainAcks:
    """Plain successes as the function's parallel arrays."""

    queues: list[str]
    ids: list[str]
    leases: list[str]
    fences: list[int]
    results: list[bytes | None]
    versions: list[int]

    def params(self) -> tuple:
        return (self.queues, self.ids, self.leases, self.fences, self.results, self.versions)


NO_ACKS = PlainAcks([], [], [], [], [], [])


def plain_acks(acks: Sequence[AckRequest]) -> PlainAcks | None:
    """The batch as the function's arrays, or None when any ack needs the shared
    lifecycle: another outcome, an error or log lines to record, a delay or result to
    validate, or a job acked twice."""
    seen: set[str] = set()
    for a in acks:
        version = a.result_schema_version
        if (not plain_success(a) or a.claim.job.id in seen
                or isinstance(version, bool) or not isinstance(version, int)
                or (a.result is not None and (not isinstance(a.result, bytes | bytearray)
                                              or len(a.result) > MAX_PAYLOAD))):
            return None
        seen.add(a.claim.job.id)
    return PlainAcks(
        queues=[a.claim.job.queue for a in acks],
        ids=[a.claim.job.id for a in acks],
        leases=[a.claim.lease_id for a in acks],
        fences=[a.claim.fence for a in acks],
        results=[None if a.result is None else bytes(a.result) for a in acks],
        versions=[a.result_schema_version for a in acks],
    )


def admit(
    conn: PgConnection, worker_id: str, queues: Sequence[str], capacity: int, lease_ms: int,
    quantum: int | None, acks: PlainAcks = NO_ACKS, now: int | None = None,
    try_plain: bool = False,
) -> tuple[list[str], list[Claim]]:
    """Apply `acks` and admit, in one statement; returns (lost job ids, claims).
    `now`: the store time of acks the caller already applied in this transaction.
    `try_plain`: try the function's early exit first; a lost id DECLINED in the result
    says it declined (a policy had its say, or an ack needs the policy block)."""
    lease_id = new_lease_id()
    rows = conn.execute(ADMIT, (
        worker_id, list(queues), capacity, lease_ms, quantum, lease_id, now, *acks.params(),
        try_plain,
    )).fetchall()
    return [r[0] for r in rows if r[0] is not None], _claims(rows, lease_id)


def _claims(rows: list[tuple], lease_id: str) -> list[Claim]:
    claims = []
    for r in rows:
        if r[0] is None:
            job = row_to_job(r[1:])
            claims.append(Claim(job, lease_id, job.fence, job.lease_expires_at_ms))  # type: ignore[arg-type]
    return claims


def ack_many(conn: PgConnection, acks: PlainAcks) -> list[str]:
    """Apply plain successes in one statement (the function with no queue to admit
    from); returns the lost job ids."""
    return admit(conn, "", [], 0, 1, None, acks)[0]


class ServerAdmission:
    """PostgresStore's admit, ack_many and ack_and_admit: one statement each when the
    acks are plain successes (a draining worker's steady state)."""

    db: PgDatabase
    # Queues where a policy had a say in the last early-exit attempt, and until when
    # their admits skip it: checking first costs a policy-bound admit ~0.1-0.2 ms, so
    # the early exit is tried again after `plain_retry_s`.
    _policy_bound: dict[str, float]
    plain_retry_s: float = PLAIN_RETRY_S
    # The adaptive rate classes as last read, and when (time.monotonic()).
    _adaptive: set[str] = set()  # noqa: RUF012 - replaced whole, never mutated
    _adaptive_checked: float = float("-inf")
    _finished_announcer: FinishedAnnouncer

    def admit(self, worker_id: str, queues: Sequence[str], capacity: int,
              lease_ms: int = 30_000, quantum: int | None = None) -> list[Claim]:
        validate_admit_args(worker_id, queues, capacity, lease_ms, quantum)
        return self._admit(worker_id, queues, capacity, lease_ms, quantum, NO_ACKS)[1]

    def _admit(self, worker_id: str, queues: Sequence[str], capacity: int, lease_ms: int,
               quantum: int | None, acks: PlainAcks) -> tuple[list[str], list[Claim]]:
        """One call of the function, trying its early exit first unless a policy had a
        say on this queue lately; returns (lost job ids, claims)."""
        names = list(dict.fromkeys(queues))
        bound = self._policy_bound
        now = time.monotonic()
        try_plain = (len(names) == 1 and quantum is None and capacity > 0
                     and bound.get(names[0], 0.0) <= now)
        def call() -> tuple[list[str], list[Claim]]:
            with self.db.autocommit() as conn:
                return admit(conn, worker_id, names, capacity, lease_ms, quantum, acks,
                             try_plain=try_plain)

        lost, claims = again_after_deadlock(call)
        if try_plain and DECLINED in lost:
            lost.remove(DECLINED)
            if len(bound) >= MAX_POLICY_BOUND:
                bound.clear()
            bound[names[0]] = now + self.plain_retry_s
        return lost, claims

    def ack_many(self, acks: Sequence[AckRequest]) -> list[str]:
        plain = plain_acks(acks) if acks else None
        if plain is None:
            lost = super().ack_many(acks)  # type: ignore[misc]
        else:
            with self.db.autocommit() as conn:
                lost = ack_many(conn, plain)
            self._raise_adaptive(acks, lost)
        self._acked(acks)
        return lost

    def ack_and_admit(
        self, acks: Sequence[AckRequest], worker_id: str, queues: Sequence[str],
        capacity: int, lease_ms: int = 30_000, quantum: int | None = None,
    ) -> tuple[list[str], list[Claim]]:
        validate_admit_args(worker_id, queues, capacity, lease_ms, quantum)
        plain = plain_acks(acks)
        if plain is not None:
            result = self._admit(worker_id, queues, capacity, lease_ms, quantum, plain)
            self._raise_adaptive(acks, result[0])
            self._acked(acks)
            return result
        if classes_written(acks) or succeeded_classes(acks, ()) & self._adaptive_names():
            # The acks lock class rows in name order, and admission takes its own in name
            # order again: two orders in one transaction could deadlock against another
            # admission. The acks commit first, then the turn admits on its own.
            lost = self.ack_many(acks)
            return lost, self._admitted_after_acks(worker_id, queues, capacity, lease_ms,
                                                   quantum)
        store: Any = self

        def call() -> tuple[list[str], Any, list[Claim]]:
            with self.db.transaction() as conn:
                # The function's lock order: queues, then the counters claims will take.
                conn.dialect.lock_queues(
                    conn, sorted({a.claim.job.queue for a in acks} | set(queues)))
                conn.execute(LOCK_COUNTERS, (list(dict.fromkeys(queues)),))
                # The store time once the locks are held, as the function reads it.
                now = store_time(conn)
                lost, wake = store._apply_acks(conn, now, acks)
                claims = admit(conn, worker_id, queues, capacity, lease_ms, quantum,
                               now=now)[1]
            return lost, wake, claims

        lost, wake, claims = again_after_deadlock(call)
        store._publish(wake)
        self._acked(acks)
        return lost, claims

    def explain_admission(self, job_id: str) -> Explanation | None:
        """What the function's policy block would say of the job now, read-only."""
        with self.db.read_with_clock() as (conn, now):
            row = conn.execute(EXPLAIN, (job_id, now)).fetchone()
            if row is None or row[0] is None:
                return None
            admissible, blocked_by, detail, wait_ms = row
            explanation = Explanation(admissible, blocked_by, detail,
                                      None if wait_ms is None else int(wait_ms))
            adaptive.annotate(cast(Any, conn), explanation, job_id)
        return explanation

    def _admitted_after_acks(self, worker_id: str, queues: Sequence[str], capacity: int,
                             lease_ms: int, quantum: int | None) -> list[Claim]:
        """The admission half of a turn whose acks already committed. An outage here
        must not report the acks as failed (a worker would send them again and hear its
        jobs were lost): the turn admits nothing and the worker's next poll meets it."""
        try:
            return self._admit(worker_id, queues, capacity, lease_ms, quantum, NO_ACKS)[1]
        except StoreUnavailable as exc:
            log.warning("admission after committed acks failed: %s", exc)
            return []

    def _adaptive_names(self) -> set[str]:
        """The adaptive rate classes, read again at most every ADAPTIVE_RECHECK_S."""
        now = time.monotonic()
        if now >= self._adaptive_checked + ADAPTIVE_RECHECK_S:
            with self.db.read() as conn:
                self._adaptive = adaptive.adaptive_names(cast(Any, conn))
            self._adaptive_checked = now
        return self._adaptive

    def _raise_adaptive(self, acks: Sequence[AckRequest], lost: Sequence[str]) -> None:
        """The function applied these plain successes; their adaptive classes' increase
        (adaptive.succeeded) follows in a transaction of its own, only for classes this
        process has lately seen adaptive: a batch of other classes costs no statement.
        The acks are in by then: a failure here is logged, not raised (the ack's caller
        would take its committed acks for failed), and the next success raises."""
        names = succeeded_classes(acks, lost)
        if not names:
            return

        def call() -> None:
            with self.db.write() as (conn, store_now):
                adaptive.succeeded(cast(Any, conn), store_now, names)

        try:
            names &= self._adaptive_names()
            if names:
                again_after_deadlock(call)
        except StoreUnavailable as exc:
            log.warning("adaptive raise after committed acks failed: %s", exc)

    def _acked(self, acks: Sequence[AckRequest]) -> None:
        """Committed acks are finished (or rescheduled) jobs: live views hear of their
        queues, coalesced (announce.py), never one NOTIFY per job or per commit."""
        if acks:
            self._finished_announcer.finished({a.claim.job.queue for a in acks})
