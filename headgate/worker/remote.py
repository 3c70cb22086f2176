"""Workers in any language: the worker's side of admission for the HTTP worker protocol
(docs/api.md, Worker protocol). The API's routes (headgate/api/worker_protocol.py) only
map HTTP to the methods here.

Every decision stays the store's. A claim is ``Store.admit`` with the worker's id and
queues, the very call a Python worker's dispatcher makes, so rate classes, fairness,
concurrency ceilings and quarantine hold across both kinds of worker; an ack, renewal,
progress or output names the claim's lease id and fence and is refused by the store
(``LeaseLost``) once the lease moved on. What a Python worker keeps in its own process
and a remote one cannot is kept here instead:

- the session: the worker's registry row (queues, kinds, capacity, agent), read back
  from the store, so any server process on the database serves any remote worker, and
  a row silent past the stale bound (the 15 minutes ``/workers`` ages workers by) is
  unknown: its worker registers again. Leases it stopped extending expire, and the
  reclaimer duty takes its jobs back as it does a Python worker's;
- its capacity, checked against the running jobs the store says it holds, with one
  claim of a worker at a time per process, so it never holds more than it registered;
- the long poll: an empty claim waits on the store's activity signal (and the change
  probe, which hears other processes' commits on SQLite), polling with the dispatcher's
  backoff for what commits nothing (a rate class refilling, a scheduled job coming due).
  A long poll whose client has gone (killed mid-wait) stops claiming: the jobs it would
  take would sit leased to nobody until the lease ran out and each be charged a crash
  for a run that never started;
- what it does not handle: a claimed job of a kind the worker did not register is
  recorded undecodable, as a Python worker records a kind it has no handler for.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from headgate.core import (
    AckRequest,
    Claim,
    HeadgateError,
    InvalidInput,
    Job,
    LeaseLost,
    NotFound,
    Outcome,
    State,
)
from headgate.core.envelope import check_int, check_text
from headgate.core.job import Blob
from headgate.core.records import RunningJob, WorkerBeat, WorkerRecord
from headgate.store.port import Store

from .execution import DEFAULT_RATE_LIMITED_SNOOZE_MS
from .polling import Backoff, change_probe
from .run_state import (
    STATUS_QUIET,
    STATUS_RESTARTING,
    STATUS_RUNNING,
    STATUS_STOPPED,
    STATUS_STOPPING,
)

log = logging.getLogger("headgate.worker")

DEFAULT_STALE_MS = 900_000
HEARTBEAT_MS = 10_000
MAX_WAIT_MS = 30_000
MAX_CAPACITY = 1_000
MAX_LEASE_MS = 86_400_000
MAX_AGENT = 255
MAX_KINDS = 1_000
# Running jobs read to count what a worker holds: more than any fleet's slots.
RUNNING_SCAN = 100_000
# How long a session read from the store is trusted before it is read again (another
# server may have deregistered it, the aging duty may have forgotten it).
RECHECK_S = 1.0
# The change probe's interval while a claim waits (SQLite: another process's commit).
PROBE_S = 0.05
# How long a claim waits for another claim of the same worker to end before a 409.
CLAIM_QUEUE_S = 1.0
# Outcomes a worker may report as a failure.
FAIL_OUTCOMES = ("retry", "skip", "rate_limited", "throttled", "undecodable")
# Signals and the status they put the worker in (resign: duties only, none here).
SIGNAL_STATUS = {"quiet": STATUS_QUIET, "resume": STATUS_RUNNING,
                 "restart": STATUS_RESTARTING, "terminate": STATUS_STOPPING}


class WorkerConflict(HeadgateError):
    """The worker's state forbids the call (at capacity, deregistered, a lease it does
    not hold, a stale fence); nothing was changed. `fields` add what the worker needs to
    act on it."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.fields = fields


class WorkerForbidden(HeadgateError):
    """The caller may not serve the worker's queues (a worker token bound to others)."""


@dataclass
class Session:
    worker_id: str
    queues: tuple[str, ...]
    kinds: frozenset[str]
    capacity: int
    agent: str
    host: str
    pid: int
    started_at_ms: int
    status: str = STATUS_RUNNING
    polls: int = 0
    empty_polls: int = 0
    # A signal a registration's write picked up, delivered by the next heartbeat.
    pending_signal: str | None = None
    checked_at: float = 0.0
    claiming: threading.Lock = field(default_factory=threading.Lock)

    def row(self, inflight: int) -> WorkerBeat:
        return WorkerBeat(self.worker_id, host=self.host, pid=self.pid, queues=self.queues,
                          concurrency=self.capacity, inflight=inflight, polls=self.polls,
                          empty_polls=self.empty_polls, started_at_ms=self.started_at_ms,
                          status=self.status, agent=self.agent, kinds=tuple(sorted(self.kinds)))

    def handles(self, kind: str) -> bool:
        return not self.kinds or kind in self.kinds


@dataclass(frozen=True)
class ClaimAnswer:
    claims: list[Claim]
    status: str


@dataclass(frozen=True)
class HeartbeatAnswer:
    """A remote worker's heartbeat reply: the operator signal to deliver (once), its
    status, the claims it holds, and which `(job id, fence)` it runs are no longer its."""

    signal: str | None
    status: str
    inflight: int
    cancelled: list[tuple[str, int]]


def _stub(job_id: str, fence: int) -> Claim:
    """A claim naming only (job, fence), for the heartbeat's check of what a worker
    says it runs: the store compares nothing else."""
    job = Job(id=job_id, kind="", queue="", state=State.RUNNING, schema_version=1,
              priority=0, partition_key="", rate_class="", weight=1, fingerprint="",
              scheduled_at_ms=0, max_attempts=1, retention_ms=0, tags=(), sticky_worker="",
              headers={}, attempt=0, crash_attempt=0, fence=fence, lease_id=None,
              lease_expires_at_ms=None, worker_id=None, enqueued_at_ms=0,
              attempted_at_ms=None, finalized_at_ms=None, errors=[],
              periodic_schedule_id="", periodic_tick_ms=None, cancel_requested=False)
    return Claim(job, "", fence, 0)


def _names(what: str, values: Sequence[str], high: int) -> tuple[str, ...]:
    out: list[str] = []
    for value in values:
        check_text(what, value, 1, high)
        if value not in out:
            out.append(value)
    return tuple(out)


class RemoteWorkers:
    """The sessions of remote workers on one store, for one server process."""

    def __init__(self, store: Store, *, stale_ms: int = DEFAULT_STALE_MS,
                 lease_ms: int = 30_000, heartbeat_ms: int = HEARTBEAT_MS,
                 max_wait_ms: int = MAX_WAIT_MS) -> None:
        self.store = store
        self.stale_ms = stale_ms
        self.lease_ms = lease_ms
        self.heartbeat_ms = heartbeat_ms
        self.max_wait_ms = max_wait_ms
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._probe = change_probe(store)

    # -- the session ----------------------------------------------------------------
    def register(self, *, queues: Sequence[str], capacity: int, agent: str,
                 kinds: Sequence[str] = (), worker_id: str | None = None, host: str = "",
                 pid: int = 0, allowed: Collection[str] | None = None) -> Session:
        """Create or renew a remote worker's registry row. A live Python worker's id is
        refused: a remote worker must not act in its name."""
        if worker_id is None:
            worker_id = f"http-{secrets.token_hex(6)}"
        check_text("worker_id", worker_id)
        names = _names("queue", queues, 255)
        if not names:
            raise InvalidInput("queues must name at least one queue")
        kind_names = _names("kind", kinds, 128)
        if len(kind_names) > MAX_KINDS:
            raise InvalidInput(f"kinds must name at most {MAX_KINDS} kinds")
        check_int("capacity", capacity, 1, MAX_CAPACITY)
        check_text("agent", agent, 0, MAX_AGENT)
        check_text("host", host, 0, 255)
        check_int("pid", pid, 0, 2**31 - 1)
        self._check_allowed(names, allowed)
        row = self._read_row(worker_id)
        if row is not None and row.agent is None and row.status != STATUS_STOPPED:
            raise WorkerConflict(f"worker {worker_id} is a Python worker; register another id")
        session = Session(worker_id, names, frozenset(kind_names), capacity, agent, host,
                          pid, self.store.now_ms())
        reply = self.store.heartbeat(session.row(self._held_count(worker_id)))
        session.pending_signal = reply.signal
        session.checked_at = time.monotonic()
        with self._lock:
            old = self._sessions.get(worker_id)
            if old is not None:
                session.claiming = old.claiming
            self._sessions[worker_id] = session
        log.info("remote worker %s registered (%s): queues %s, capacity %d", worker_id,
                 agent or "no agent", ",".join(names), capacity)
        return session

    def session(self, worker_id: str, allowed: Collection[str] | None = None, *,
                fresh: bool = False) -> Session:
        """The live, registered session of `worker_id`: NotFound when the registry does
        not know it (or it aged out), WorkerConflict when it is not a remote worker or
        deregistered, WorkerForbidden when the caller may not serve its queues."""
        with self._lock:
            session = self._sessions.get(worker_id)
        if session is None or fresh or time.monotonic() - session.checked_at > RECHECK_S:
            session = self._reload(worker_id, session)
        if session.status == STATUS_STOPPED:
            raise WorkerConflict(f"worker {worker_id} is deregistered; register again")
        self._check_allowed(session.queues, allowed)
        return session

    def _reload(self, worker_id: str, cached: Session | None) -> Session:
        row = self._read_row(worker_id)
        if row is None:
            with self._lock:
                self._sessions.pop(worker_id, None)
            if cached is not None:
                cached.status = STATUS_STOPPED
            raise NotFound("worker", worker_id)
        if row.agent is None:
            raise WorkerConflict(f"worker {worker_id} is a Python worker, not registered "
                                 "over HTTP")
        session = cached or Session(worker_id, (), frozenset(), 0, "", "", 0, 0)
        session.queues = row.queues
        session.kinds = frozenset(row.kinds or ())
        session.capacity = row.concurrency
        session.agent = row.agent
        session.host, session.pid = row.host, row.pid
        session.started_at_ms = row.started_at_ms
        session.status = row.status
        if cached is None:
            session.polls, session.empty_polls = row.polls, row.empty_polls
        session.checked_at = time.monotonic()
        with self._lock:
            self._sessions[worker_id] = session
        return session

    def _read_row(self, worker_id: str) -> WorkerRecord | None:
        for row in self.store.list_workers(self.stale_ms):
            if row.worker_id == worker_id:
                return row
        return None

    @staticmethod
    def _check_allowed(queues: Sequence[str], allowed: Collection[str] | None) -> None:
        if allowed is None:
            return
        outside = [q for q in queues if q not in allowed]
        if outside:
            raise WorkerForbidden(f"this token may not serve queue {outside[0]}")

    def _held(self, worker_id: str) -> list[RunningJob]:
        return [r for r in self.store.running_jobs(RUNNING_SCAN) if r.worker_id == worker_id]

    def _held_count(self, worker_id: str) -> int:
        return len(self._held(worker_id))

    # -- heartbeat and signals ------------------------------------------------------
    def heartbeat(self, worker_id: str, running: Sequence[tuple[str, int]] = (),
                  allowed: Collection[str] | None = None) -> HeartbeatAnswer:
        """Refresh the registry row; the reply carries a pending operator signal
        (delivered once) and which of the `(job id, fence)` the worker says it runs are
        no longer its to run (an operator cancelled the job, or it moved on to another
        attempt)."""
        session = self.session(worker_id, allowed, fresh=True)
        for job_id, fence in running:
            check_text("job_id", job_id)
            check_int("fence", fence, 0)
        held = self._held_count(worker_id)
        reply = self.store.heartbeat(session.row(held), [_stub(j, f) for j, f in running])
        signal = session.pending_signal or reply.signal
        session.pending_signal = None
        if signal in SIGNAL_STATUS and session.status != SIGNAL_STATUS[signal]:
            session.status = SIGNAL_STATUS[signal]
            self.store.heartbeat(session.row(held))  # the console shows the new status
        if signal:
            log.info("remote worker %s: operator signal %s", worker_id, signal)
        return HeartbeatAnswer(signal, session.status, held,
                               [(c.job.id, c.fence) for c in reply.cancelled])

    # -- claims ---------------------------------------------------------------------
    def claim(self, worker_id: str, max_jobs: int | None = None, wait_ms: int = 0,
              lease_ms: int | None = None, allowed: Collection[str] | None = None,
              connected: Callable[[], bool] | None = None) -> ClaimAnswer:
        """Up to `max_jobs` (default: every free slot) jobs by the store's admission,
        waiting up to `wait_ms` for one. Refused (WorkerConflict) when that would take
        the worker past its capacity, or while another claim of it is waiting.
        `connected` says whether the caller is still there to receive the answer: once
        it says no, nothing more is claimed and what was just claimed is handed back
        uncharged."""
        session = self.session(worker_id, allowed)
        check_int("wait_ms", wait_ms, 0, self.max_wait_ms)
        lease = self.lease_ms if lease_ms is None else check_int("lease_ms", lease_ms, 1,
                                                                  MAX_LEASE_MS)
        if max_jobs is not None:
            check_int("max", max_jobs, 1, session.capacity)
        # A short claim of the same worker (a retry racing its predecessor) is waited
        # for; a long poll is not.
        if not session.claiming.acquire(timeout=CLAIM_QUEUE_S):
            raise WorkerConflict(f"a claim of worker {worker_id} is already waiting")
        try:
            held = self._held_count(worker_id)
            free = session.capacity - held
            want = free if max_jobs is None else max_jobs
            if want > free or free <= 0:
                raise WorkerConflict(
                    f"claim past capacity: worker {worker_id} holds {held} of "
                    f"{session.capacity}", capacity=session.capacity, held=held,
                    free=max(free, 0))
            return self._claim_loop(session, want, lease, wait_ms, connected)
        finally:
            session.claiming.release()

    def _claim_loop(self, session: Session, want: int, lease_ms: int, wait_ms: int,
                    connected: Callable[[], bool] | None) -> ClaimAnswer:
        deadline = time.monotonic() + wait_ms / 1000
        backoff = Backoff(25, 1_000)
        activity = self.store.activity
        while True:
            seq = activity.seq
            token = self._probe() if self._probe is not None else None
            if connected is not None and not connected():
                return ClaimAnswer([], session.status)  # nobody to run what it claims
            if session.status == STATUS_RUNNING:
                claims = self.store.admit(session.worker_id, session.queues, want, lease_ms)
                session.polls += 1
                mine = self._settle_unhandled(session, claims)
                if mine and connected is not None and not connected():
                    # Gone while admit ran: back to the queue, no crash charged.
                    self.store.release(mine)
                    log.info("remote worker %s left mid-claim; %d job(s) handed back",
                             session.worker_id, len(mine))
                    return ClaimAnswer([], session.status)
                if mine:
                    return ClaimAnswer(mine, session.status)
                if claims:  # all undecodable here: their slots are free again, go on
                    continue
                session.empty_polls += 1
            elif session.status != STATUS_QUIET:
                return ClaimAnswer([], session.status)  # stopping: claim nothing more
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ClaimAnswer([], session.status)
            self._wait(seq, token, min(remaining, backoff.next_ms() / 1000))

    def _wait(self, seq: int, token: object, seconds: float) -> None:
        """Until the store signals activity, the change probe sees a commit, or
        `seconds` pass."""
        end = time.monotonic() + seconds
        activity = self.store.activity
        while (left := end - time.monotonic()) > 0:
            step = min(left, PROBE_S) if self._probe is not None else left
            if activity.wait(seq, step) != seq:
                return
            if self._probe is not None and self._probe() != token:
                return

    def _settle_unhandled(self, session: Session, claims: list[Claim]) -> list[Claim]:
        """The claims the worker handles; the others are recorded undecodable, as a
        Python worker records a kind it has no handler for."""
        if not session.kinds:
            return claims
        foreign = [c for c in claims if not session.handles(c.job.kind)]
        if foreign:
            self.store.ack_many([AckRequest(
                c, Outcome.UNDECODABLE.value,
                f"no handler for kind {c.job.kind!r} on worker {session.worker_id}")
                for c in foreign])
        return [c for c in claims if session.handles(c.job.kind)]

    # -- one claimed job ------------------------------------------------------------
    def held_claim(self, worker_id: str, job_id: str, lease_id: str, fence: int,
                   allowed: Collection[str] | None = None) -> Claim:
        """The claim `(job, lease id, fence)` if the worker holds it now; otherwise
        NotFound (no such job) or WorkerConflict (not its job, another lease, a stale
        fence). The store checks lease and fence again in its write: this read only
        gives the refusal its reason."""
        session = self.session(worker_id, allowed)
        check_text("job_id", job_id)
        check_text("lease_id", lease_id)
        check_int("fence", fence, 0)
        job = self.store.get_job(job_id)
        if job is None:
            raise NotFound("job", job_id)
        if job.state is not State.RUNNING or job.worker_id != session.worker_id:
            raise WorkerConflict(f"job {job_id} is not held by worker {worker_id}",
                                 state=job.state.value)
        if job.fence != fence:
            raise WorkerConflict(f"stale fence: job {job_id} is at fence {job.fence}, not "
                                 f"{fence}", fence=job.fence)
        if job.lease_id != lease_id:
            raise WorkerConflict(f"job {job_id} is held under another lease")
        return Claim(job, lease_id, fence, job.lease_expires_at_ms or 0)

    def extend(self, worker_id: str, job_id: str, lease_id: str, fence: int,
               lease_ms: int | None = None, allowed: Collection[str] | None = None) -> int:
        """Renew one lease; returns the expiry it has at least (store time)."""
        claim = self.held_claim(worker_id, job_id, lease_id, fence, allowed)
        lease = self.lease_ms if lease_ms is None else check_int("lease_ms", lease_ms, 1,
                                                                  MAX_LEASE_MS)
        now = self.store.now_ms()
        if self.store.renew([claim], lease):
            raise LeaseLost(job_id)
        return now + lease

    def complete(self, worker_id: str, job_id: str, lease_id: str, fence: int, *,
                 result: Blob | None = None, output: Blob | None = None,
                 allowed: Collection[str] | None = None) -> None:
        claim = self.held_claim(worker_id, job_id, lease_id, fence, allowed)
        if output is not None:
            self.store.write_output(claim, output.bytes, output.schema_version)
        self.store.ack(claim, Outcome.SUCCESS,
                       result=None if result is None else result.bytes,
                       result_schema_version=1 if result is None else result.schema_version)

    def fail(self, worker_id: str, job_id: str, lease_id: str, fence: int, *, error: str,
             outcome: str = "retry", delay_ms: int | None = None, logs: Sequence[str] = (),
             allowed: Collection[str] | None = None) -> str:
        """Record a failed attempt; returns the outcome the store applied. `retry` runs
        it again after `delay_ms` (default: the backoff) while attempts are left; `skip`
        archives it; `rate_limited` hands it back without spending an attempt and, with
        `delay_ms`, empties its rate class for that long, fleet-wide (a job without a
        class is snoozed instead, as a Python handler's RateLimited is); `throttled` is a
        Python handler's Throttled: snoozed for `delay_ms` (default its class's window)
        without spending an attempt, and an adaptive class's limit is cut."""
        if outcome not in FAIL_OUTCOMES:
            raise InvalidInput(f"outcome must be one of {'|'.join(FAIL_OUTCOMES)}")
        check_text("error", error, 1, 65_536)
        if delay_ms is not None:
            check_int("retry_in_ms", delay_ms, 0, MAX_LEASE_MS * 365)
        claim = self.held_claim(worker_id, job_id, lease_id, fence, allowed)
        applied = Outcome(outcome)
        if applied is Outcome.RATE_LIMITED and not claim.job.rate_class:
            applied = Outcome.SNOOZE
            delay_ms = DEFAULT_RATE_LIMITED_SNOOZE_MS if delay_ms is None else delay_ms
        # A throttle, as a Python handler's, is not a failure to record.
        throttled = applied is Outcome.THROTTLED
        self.store.ack(claim, applied, None if throttled else error, delay_ms,
                       logs=() if throttled else tuple(logs))
        return applied.value

    def snooze(self, worker_id: str, job_id: str, lease_id: str, fence: int, delay_ms: int,
               allowed: Collection[str] | None = None) -> None:
        """Run it again after `delay_ms` without spending an attempt."""
        check_int("delay_ms", delay_ms, 0, MAX_LEASE_MS * 365)
        claim = self.held_claim(worker_id, job_id, lease_id, fence, allowed)
        self.store.ack(claim, Outcome.SNOOZE, None, delay_ms)

    def progress(self, worker_id: str, job_id: str, lease_id: str, fence: int, current: int,
                 total: int, message: str | None = None,
                 allowed: Collection[str] | None = None) -> None:
        check_int("current", current, 0)
        check_int("total", total, 0)
        claim = self.held_claim(worker_id, job_id, lease_id, fence, allowed)
        self.store.report_progress(claim, current, total, message)

    # -- leaving --------------------------------------------------------------------
    def deregister(self, worker_id: str, allowed: Collection[str] | None = None) -> int:
        """Hand every job the worker holds back (uncharged, as a Python worker's drain
        does) and mark it stopped; its later calls are refused. Returns how many jobs
        went back."""
        session = self.session(worker_id, allowed, fresh=True)
        session.status = STATUS_STOPPED  # a waiting claim of it ends empty
        # No admit of it in flight while its jobs are collected.
        got = session.claiming.acquire(timeout=self.max_wait_ms / 1000 + 5)
        try:
            released = self._hand_back(worker_id)
            self.store.heartbeat(session.row(0))
        finally:
            if got:
                session.claiming.release()
        log.info("remote worker %s deregistered; %d job(s) handed back", worker_id, released)
        return released

    def _hand_back(self, worker_id: str) -> int:
        claims = []
        for r in self._held(worker_id):
            job = self.store.get_job(r.id)
            if job is not None and job.lease_id is not None and job.worker_id == worker_id:
                claims.append(Claim(job, job.lease_id, job.fence, job.lease_expires_at_ms or 0))
        return self.store.release(claims) if claims else 0
