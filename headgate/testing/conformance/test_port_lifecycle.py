"""The lifecycle (docs/ARCHITECTURE.md) through a real store: every transition-table row, the
invariants checked after every step, fenced writes, crash accounting to quarantine,
operator actions and sweeps. Duty leases are test_port_duties.py."""

# mypy: disable-error-code="arg-type,assignment"
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import pytest

from headgate import (
    Claim,
    Client,
    InvalidInput,
    InvalidTransition,
    Job,
    LeaseLost,
    NotFound,
    Outcome,
    Quarantined,
    State,
    Store,
    fingerprint,
)
from headgate.core.records import WorkerBeat

Q = "default"


class Checker:
    """Drives admits and checks the lifecycle invariants against the whole store."""

    def __init__(self, store: Store, all_jobs: Callable[..., list[Job]]) -> None:
        self.store = store
        self.all_jobs = all_jobs
        self.entries: Counter[str] = Counter()  # times each job entered running

    def admit(self, capacity: int = 10, lease_ms: int = 30_000, worker: str = "w",
              queues: Sequence[str] = (Q,)) -> list[Claim]:
        claims = self.store.admit(worker, list(queues), capacity=capacity, lease_ms=lease_ms)
        for claim in claims:
            self.entries[claim.job.id] += 1
            assert claim.fence == claim.job.fence == self.entries[claim.job.id]
        self.check()
        return claims

    def one(self, **kwargs: object) -> Claim:
        claims = self.admit(**kwargs)  # type: ignore[arg-type]
        assert len(claims) == 1
        return claims[0]

    def ack(self, claim: Claim, outcome: Outcome, **kwargs: object) -> Job | None:
        self.store.ack(claim, outcome, **kwargs)  # type: ignore[arg-type]
        self.check()
        return self.store.get_job(claim.job.id)

    def lose(self, claim: Claim) -> Job:
        """Let `claim`'s lease expire on the store clock and reclaim it."""
        while self.store.now_ms() <= claim.lease_expires_at_ms:
            time.sleep(0.01)
        assert self.store.reclaim_expired() >= 1
        self.check()
        job = self.store.get_job(claim.job.id)
        assert job is not None
        return job

    def check(self) -> None:
        jobs = self.all_jobs(self.store)
        for job in jobs:
            running = job.state is State.RUNNING
            # a running job has a lease id and expiry; no other state has one
            assert (job.lease_id is not None) == running, job
            assert (job.lease_expires_at_ms is not None) == running, job
            # fence grows by exactly 1 on every entry into running
            assert job.fence == self.entries[job.id], job
        # counts() come from maintained counters; they must equal a recount
        recount = Counter(job.state.value for job in jobs)
        counted = {state: n for state, n in self.store.counts().items() if n}
        assert counted == dict(recount)
        per_queue = {state: n for state, n in self.store.counts(Q).items() if n}
        assert per_queue == dict(Counter(j.state.value for j in jobs if j.queue == Q))


@pytest.fixture
def chk(store: Store, all_jobs: Callable[..., list[Job]]) -> Iterator[Checker]:
    checker = Checker(store, all_jobs)
    yield checker
    checker.check()


def get(store: Store, job_id: str) -> Job:
    job = store.get_job(job_id)
    assert job is not None
    return job


def wait_until(store: Store, at_ms: int) -> None:
    while store.now_ms() < at_ms:
        time.sleep(0.01)


# -- running --success--> completed / deleted --------------------------------------------

def test_success_completes_with_a_readable_result(store: Store, client: Client,
                                                  chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    claim = chk.one()
    before = store.now_ms()
    job = chk.ack(claim, Outcome.SUCCESS, result=b"\x00result\xff", result_schema_version=3)
    assert job is not None and job.state is State.COMPLETED
    assert job.attempt == 0 and job.crash_attempt == 0 and job.errors == []
    assert job.finalized_at_ms is not None and job.finalized_at_ms >= before
    result = store.get_result(job_id)
    assert result is not None
    assert (result.bytes, result.schema_version) == (b"\x00result\xff", 3)


def test_success_without_result_has_none(store: Store, client: Client, chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    chk.ack(chk.one(), Outcome.SUCCESS)
    assert get(store, job_id).state is State.COMPLETED
    assert store.get_result(job_id) is None


def test_success_with_retention_zero_deletes(store: Store, client: Client,
                                             chk: Checker) -> None:
    job_id = client.enqueue("work", b"in", retention_ms=0)
    assert chk.ack(chk.one(), Outcome.SUCCESS, result=b"r") is None
    assert store.get_job(job_id) is None and store.get_result(job_id) is None


# -- retry ----------------------------------------------------------------------------

def test_retry_with_default_backoff(store: Store, client: Client, chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    claim = chk.one()
    before = store.now_ms()
    job = chk.ack(claim, Outcome.RETRY, error="boom", logs=["line 1", "line 2"])
    after = store.now_ms()
    assert job is not None and job.state is State.RETRYABLE
    assert job.attempt == 1 and job.crash_attempt == 0
    # exponential from 1 s with jitter: the first delay lies within 1 s ± 25 %
    assert before + 750 <= job.scheduled_at_ms <= after + 1250
    (entry,) = job.errors
    assert entry["attempt"] == 1 and entry["error"] == "boom"
    assert entry["logs"] == ["line 1", "line 2"] and entry["worker"] == "w"
    assert before <= entry["at_ms"] <= after
    assert store.admit("w", [Q], capacity=1) == []  # not due yet
    assert get(store, job_id).state is State.RETRYABLE


def test_retry_with_explicit_delay(store: Store, client: Client, chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    claim = chk.one()
    before = store.now_ms()
    job = chk.ack(claim, Outcome.RETRY, error="later", delay_ms=120)
    after = store.now_ms()
    assert job is not None and job.state is State.RETRYABLE
    assert before + 120 <= job.scheduled_at_ms <= after + 120
    wait_until(store, job.scheduled_at_ms)
    again = chk.one()  # retryable --backoff_due--> available --admitted--> running
    assert again.job.id == job_id and again.job.attempt == 1 and again.fence == 2


def test_retry_exhausting_max_attempts_archives(store: Store, client: Client,
                                                chk: Checker) -> None:
    job_id = client.enqueue("work", b"in", max_attempts=3)
    for attempt in (1, 2):
        job = chk.ack(chk.one(), Outcome.RETRY, error=f"fail {attempt}", delay_ms=0)
        assert job is not None and job.state is State.RETRYABLE and job.attempt == attempt
    job = chk.ack(chk.one(), Outcome.RETRY, error="fail 3", logs=["last words"])
    assert job is not None and job.state is State.ARCHIVED
    assert job.attempt == 3 and job.crash_attempt == 0
    assert [e["attempt"] for e in job.errors] == [1, 2, 3]
    assert [e["error"] for e in job.errors] == ["fail 1", "fail 2", "fail 3"]
    assert job.errors[-1]["logs"] == ["last words"]
    assert job.finalized_at_ms is not None
    assert store.admit("w", [Q], capacity=1) == []
    assert get(store, job_id).state is State.ARCHIVED


def test_single_attempt_job_archives_on_first_retry(store: Store, client: Client,
                                                    chk: Checker) -> None:
    client.enqueue("work", b"in", max_attempts=1)
    job = chk.ack(chk.one(), Outcome.RETRY, error="once")
    assert job is not None and job.state is State.ARCHIVED and job.attempt == 1


# -- skip, revoke, snooze, rate_limited, undecodable ---------------------------------------

def test_skip_archives_without_retrying(store: Store, client: Client, chk: Checker) -> None:
    client.enqueue("work", b"in", max_attempts=25)
    job = chk.ack(chk.one(), Outcome.SKIP, error="not worth it")
    assert job is not None and job.state is State.ARCHIVED
    assert job.errors[-1]["error"] == "not worth it"
    assert store.admit("w", [Q], capacity=1) == [] and store.promote_due() == 0


def test_revoke_deletes(store: Store, client: Client, chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    assert chk.ack(chk.one(), Outcome.REVOKE) is None
    assert store.get_job(job_id) is None


def test_snooze_reschedules_without_consuming_an_attempt(store: Store, client: Client,
                                                         chk: Checker) -> None:
    job_id = client.enqueue("work", b"in", max_attempts=1)
    claim = chk.one()
    before = store.now_ms()
    job = chk.ack(claim, Outcome.SNOOZE, delay_ms=150)
    after = store.now_ms()
    assert job is not None and job.state is State.SCHEDULED
    assert job.attempt == 0 and job.crash_attempt == 0
    assert before + 150 <= job.scheduled_at_ms <= after + 150
    assert store.admit("w", [Q], capacity=1) == []
    wait_until(store, job.scheduled_at_ms)
    again = chk.one()
    assert again.job.id == job_id and again.job.attempt == 0
    # max_attempts=1 and the snooze did not spend it: success is still possible
    assert chk.ack(again, Outcome.SUCCESS).state is State.COMPLETED  # type: ignore[union-attr]


def test_rate_limited_returns_to_available_and_moves_no_counter(
    store: Store, client: Client, chk: Checker
) -> None:
    job_id = client.enqueue("work", b"in")
    job = chk.ack(chk.one(), Outcome.RATE_LIMITED)
    assert job is not None and job.state is State.AVAILABLE
    assert (job.attempt, job.crash_attempt) == (0, 0)
    again = chk.one()
    assert again.job.id == job_id and again.fence == 2
    assert (again.job.attempt, again.job.crash_attempt) == (0, 0)


def test_rate_limited_with_delay_drains_the_rate_class(store: Store, client: Client,
                                                      chk: Checker) -> None:
    store.upsert_rate_class("api", limit=10, window_ms=1000, burst=10)
    client.enqueue("work", b"1", rate_class="api")
    client.enqueue("work", b"2", rate_class="api")
    first = chk.admit(capacity=1)[0]
    job = chk.ack(first, Outcome.RATE_LIMITED, delay_ms=5_000)
    assert job is not None and job.state is State.AVAILABLE and job.attempt == 0
    # the whole fleet backs off: nothing of that class is admitted meanwhile
    assert chk.admit(capacity=10) == []
    (rc,) = store.rate_classes()
    assert rc.tokens_available < 0


def test_undecodable_is_never_retried(store: Store, client: Client, chk: Checker) -> None:
    job_id = client.enqueue("work", b"\xff\xfe", max_attempts=25)
    job = chk.ack(chk.one(), Outcome.UNDECODABLE, error="cannot decode")
    assert job is not None and job.state is State.UNDECODABLE
    assert job.errors[-1]["error"] == "cannot decode" and job.finalized_at_ms is not None
    assert store.promote_due() == 0 and store.admit("w", [Q], capacity=1) == []
    assert get(store, job_id).state is State.UNDECODABLE


def test_every_outcome_is_rejected_once_the_job_left_running(
    store: Store, client: Client, chk: Checker
) -> None:
    client.enqueue("work", b"in")
    claim = chk.one()
    chk.ack(claim, Outcome.SUCCESS)
    for outcome in Outcome:
        with pytest.raises(LeaseLost):
            store.ack(claim, outcome)


def test_ack_rejects_bad_arguments(store: Store, client: Client, chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    claim = chk.one()
    with pytest.raises(InvalidInput, match="delay_ms"):
        store.ack(claim, Outcome.RETRY, delay_ms=-1)
    with pytest.raises(InvalidInput, match="result"):
        store.ack(claim, Outcome.SUCCESS, result=b"x" * (1024 * 1024 + 1))
    chk.check()
    assert get(store, job_id).state is State.RUNNING  # nothing was written


# -- leases and fences ------------------------------------------------------------------

def test_renew_extends_and_returns_lost_claims(store: Store, client: Client,
                                               chk: Checker) -> None:
    a = client.enqueue("work", b"a")
    b = client.enqueue("work", b"b")
    claims = {c.job.id: c for c in chk.admit(lease_ms=5_000)}
    before = store.now_ms()
    assert store.renew(list(claims.values()), lease_ms=60_000) == []
    assert get(store, a).lease_expires_at_ms >= before + 60_000  # type: ignore[operator]
    store.operator_cancel(b)
    chk.check()
    assert store.renew(list(claims.values()), lease_ms=60_000) == [claims[b]]
    with pytest.raises(InvalidInput, match=">= 1"):
        store.renew(list(claims.values()), lease_ms=0)


def test_superseded_lease_is_fenced_out(store: Store, client: Client, chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    old = chk.one(lease_ms=30)
    store.report_progress(old, 1, 10, "started")
    store.write_output(old, b"partial")
    job = chk.lose(old)
    assert job.state is State.RETRYABLE and job.crash_attempt == 1 and job.attempt == 0
    store.reschedule_job(job_id, 0)
    new = chk.one()
    assert new.job.id == job_id and new.fence == old.fence + 1
    assert new.lease_id != old.lease_id
    with pytest.raises(LeaseLost) as info:
        store.ack(old, Outcome.SUCCESS, result=b"stale")
    assert info.value.job_id == job_id
    with pytest.raises(LeaseLost):
        store.report_progress(old, 9, 10, "stale")
    with pytest.raises(LeaseLost):
        store.write_output(old, b"stale")
    # Both attempts at once (a worker still holding the stale one): only the stale is lost.
    assert store.renew([old, new]) == [old]
    assert store.heartbeat(WorkerBeat("w"), [old, new]).cancelled == (old,)
    store.release([old])  # releasing a superseded claim must not touch the new lease
    chk.check()
    assert get(store, job_id).state is State.RUNNING
    # the current holder is unaffected
    store.report_progress(new, 10, 10, "done")
    store.write_output(new, b"final")
    chk.ack(new, Outcome.SUCCESS, result=b"fresh")
    assert store.get_result(job_id).bytes == b"fresh"  # type: ignore[union-attr]
    output = store.get_output(job_id)
    assert output is not None and output.bytes == b"final" and output.fence == new.fence
    progress = store.get_progress(job_id)
    assert progress is not None and (progress.current, progress.total) == (10, 10)
    assert progress.message == "done" and progress.fence == new.fence


def test_progress_and_output_are_validated(store: Store, client: Client,
                                           chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    claim = chk.one()
    store.report_progress(claim, 3, 7, "é" * 256)  # 512 bytes
    with pytest.raises(InvalidInput, match="512"):
        store.report_progress(claim, 3, 7, "x" * 513)
    with pytest.raises(InvalidInput, match="current"):
        store.report_progress(claim, -1, 7)
    progress = store.get_progress(job_id)
    assert progress is not None and progress.message == "é" * 256


def test_release_returns_claims_without_charging(store: Store, client: Client,
                                                 chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    claim = chk.one()
    assert store.release([claim]) == 1
    chk.check()
    job = get(store, job_id)
    assert job.state is State.AVAILABLE and (job.attempt, job.crash_attempt) == (0, 0)
    with pytest.raises(LeaseLost):
        store.ack(claim, Outcome.SUCCESS)


# -- crash accounting and quarantine ----------------------------------------------------------

def test_three_lost_leases_quarantine_the_fingerprint(store: Store, client: Client,
                                                      chk: Checker) -> None:
    job_id = client.enqueue("poison", b"crashes the worker")
    fp = fingerprint("poison", b"crashes the worker")
    for crash in (1, 2):
        job = chk.lose(chk.one(lease_ms=30))
        assert job.state is State.RETRYABLE
        assert (job.crash_attempt, job.attempt) == (crash, 0)
        assert job.scheduled_at_ms > store.now_ms() - 1_000  # a backoff, not immediately
        assert store.quarantine_list() == []
        store.reschedule_job(job_id, 0)
    job = chk.lose(chk.one(lease_ms=30))
    assert job.state is State.QUARANTINED
    assert (job.crash_attempt, job.attempt) == (3, 0)
    assert [e["outcome"] for e in job.errors] == ["lease_lost"] * 3
    (entry,) = store.quarantine_list()
    assert entry.fingerprint == fp and entry.kind == "poison"
    assert entry.crash_count == 3
    # the fingerprint is now refused at the door
    with pytest.raises(Quarantined) as info:
        client.enqueue("poison", b"crashes the worker")
    assert info.value.fingerprint == fp
    assert store.promote_due() == 0 and store.admit("w", [Q], capacity=1) == []
    # releasing returns its jobs to available
    assert store.quarantine_release(fp) == 1
    chk.check()
    assert store.quarantine_list() == []
    assert get(store, job_id).state is State.AVAILABLE
    assert chk.one().job.id == job_id
    client.enqueue("poison", b"crashes the worker")  # accepted again
    with pytest.raises(NotFound):
        store.quarantine_release(fp)


def test_lost_leases_and_failures_are_counted_apart(store: Store, client: Client,
                                                    chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    chk.ack(chk.one(), Outcome.RETRY, error="returned failure", delay_ms=0)
    job = chk.lose(chk.one(lease_ms=30))
    assert (job.attempt, job.crash_attempt) == (1, 1)
    store.reschedule_job(job_id, 0)
    chk.ack(chk.one(), Outcome.RETRY, error="again", delay_ms=0)
    assert (get(store, job_id).attempt, get(store, job_id).crash_attempt) == (2, 1)


# -- operator actions -------------------------------------------------------------------

def test_operator_retry_from_archived_and_cancelled(store: Store, client: Client,
                                                    chk: Checker) -> None:
    dead = client.enqueue("work", b"dead", max_attempts=1)
    chk.ack(chk.one(), Outcome.RETRY, error="x")
    assert get(store, dead).state is State.ARCHIVED
    store.operator_retry(dead)
    chk.check()
    job = get(store, dead)
    assert job.state is State.AVAILABLE and job.finalized_at_ms is None
    # the retry gets a real attempt even though the budget was spent
    chk.ack(chk.one(), Outcome.SUCCESS)
    assert get(store, dead).state is State.COMPLETED

    cancelled = client.enqueue("work", b"cancelled")
    store.operator_cancel(cancelled)
    store.operator_retry(cancelled)
    chk.check()
    assert get(store, cancelled).state is State.AVAILABLE
    with pytest.raises(InvalidTransition):
        store.operator_retry(cancelled)  # available: nothing to retry
    with pytest.raises(InvalidTransition):
        store.operator_retry(dead)  # completed is not retryable by the table
    with pytest.raises(NotFound):
        store.operator_retry("nope")


def test_operator_retry_of_an_undecodable_job(store: Store, client: Client,
                                             chk: Checker) -> None:
    """Once the missing handler is deployed, an undecodable job runs again: back to
    available with one more attempt, as a dead letter's retry."""
    job_id = client.enqueue("work", b"\xff", max_attempts=1)
    chk.ack(chk.one(), Outcome.UNDECODABLE, error="no handler for work")
    dead = get(store, job_id)
    assert dead.state is State.UNDECODABLE and dead.finalized_at_ms is not None
    store.operator_retry(job_id)
    chk.check()
    job = get(store, job_id)
    assert job.state is State.AVAILABLE and job.finalized_at_ms is None
    assert job.max_attempts > job.attempt
    assert store.counts(Q)["undecodable"] == 0 and store.counts(Q)["available"] == 1
    chk.ack(chk.one(), Outcome.SUCCESS)
    assert get(store, job_id).state is State.COMPLETED
    # The bulk retry reaches undecodable jobs too.
    other = client.enqueue("work", b"\xfe", queue="bulk")
    chk.ack(chk.one(queues=["bulk"]), Outcome.UNDECODABLE, error="no handler")
    op = store.create_operation("retry", {"queue": "bulk", "state": "undecodable"})
    while store.run_operations_batch(limit=100):
        pass
    assert store.get_operation(op.id).affected == 1  # type: ignore[union-attr]
    assert get(store, other).state is State.AVAILABLE


def test_operator_cancel_of_a_running_job_tells_the_worker(store: Store, client: Client,
                                                           chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    other = client.enqueue("work", b"other")
    claims = {c.job.id: c for c in chk.admit()}
    store.operator_cancel(job_id)
    chk.check()
    job = get(store, job_id)
    assert job.state is State.CANCELLED and job.cancel_requested
    assert job.lease_id is None and job.finalized_at_ms is not None
    reply = store.heartbeat(WorkerBeat("w", host="h", pid=1, queues=(Q,), concurrency=2,
                                       inflight=2), [claims[job_id], claims[other]])
    assert reply.cancelled == (claims[job_id],) and reply.signal is None
    with pytest.raises(LeaseLost):
        store.ack(claims[job_id], Outcome.SUCCESS)
    with pytest.raises(LeaseLost):
        store.report_progress(claims[job_id], 1, 2)
    chk.ack(claims[other], Outcome.SUCCESS)


@pytest.mark.parametrize("state", ["pending", "scheduled", "available"])
def test_operator_cancel_of_waiting_jobs(store: Store, client: Client, chk: Checker,
                                         state: str) -> None:
    fields: dict[str, object] = {
        "pending": {"pending": True},
        "scheduled": {"scheduled_at_ms": store.now_ms() + 60_000},
        "available": {},
    }[state]
    job_id = client.enqueue("work", b"in", **fields)
    assert get(store, job_id).state.value == state
    store.operator_cancel(job_id)
    chk.check()
    job = get(store, job_id)
    assert job.state is State.CANCELLED and not job.cancel_requested
    with pytest.raises(InvalidTransition):
        store.operator_cancel(job_id)


def test_operator_cancel_refused_for_terminal_jobs(store: Store, client: Client,
                                                   chk: Checker) -> None:
    job_id = client.enqueue("work", b"in")
    chk.ack(chk.one(), Outcome.SUCCESS)
    with pytest.raises(InvalidTransition):
        store.operator_cancel(job_id)
    assert get(store, job_id).state is State.COMPLETED


def test_delete(store: Store, client: Client, chk: Checker) -> None:
    waiting = client.enqueue("work", b"w")
    running = client.enqueue("work", b"r")
    store.delete_job(waiting)
    chk.check()
    assert store.get_job(waiting) is None
    claim = chk.one()
    assert claim.job.id == running
    store.delete_job(running)
    chk.check()
    with pytest.raises(LeaseLost):
        store.ack(claim, Outcome.SUCCESS)
    with pytest.raises(NotFound):
        store.delete_job(waiting)


def test_promote_pending(store: Store, client: Client, chk: Checker) -> None:
    job_id = client.enqueue("work", b"in", pending=True)
    assert get(store, job_id).pending
    store.promote_job(job_id)
    chk.check()
    assert get(store, job_id).state is State.AVAILABLE
    with pytest.raises(InvalidTransition):
        store.promote_job(job_id)
    assert chk.one().job.id == job_id


def test_reschedule(store: Store, client: Client, chk: Checker) -> None:
    job_id = client.enqueue("work", b"in", scheduled_at_ms=store.now_ms() + 60_000)
    at = store.now_ms() + 120_000
    store.reschedule_job(job_id, at)
    chk.check()
    job = get(store, job_id)
    assert job.state is State.SCHEDULED and job.scheduled_at_ms == at
    store.reschedule_job(job_id, 0)  # due now: the next admit takes it
    assert chk.one().job.id == job_id
    with pytest.raises(InvalidTransition):
        store.reschedule_job(job_id, at)  # running
    with pytest.raises(InvalidInput):
        store.reschedule_job(job_id, -5)


def test_edit_payload_changes_fingerprint(store: Store, client: Client,
                                          chk: Checker) -> None:
    job_id = client.enqueue("work", b"old")
    new_fp = fingerprint("work", b"new payload")
    store.edit_payload(job_id, b"new payload", 2, new_fp)
    chk.check()
    job = store.get_job(job_id, include_payload=True)
    assert job is not None and job.payload == b"new payload"
    assert job.fingerprint == new_fp and job.schema_version == 2
    assert store.get_job(job_id).payload is None  # type: ignore[union-attr]
    claim = chk.one()
    assert claim.job.payload == b"new payload"
    with pytest.raises(InvalidTransition):
        store.edit_payload(job_id, b"while running", 1, fingerprint("work", b"while running"))


# -- sweeps -------------------------------------------------------------------------------

def test_promote_due(store: Store, client: Client, chk: Checker) -> None:
    soon = client.enqueue("work", b"soon", scheduled_at_ms=store.now_ms() + 1_500)
    later = client.enqueue("work", b"later", scheduled_at_ms=store.now_ms() + 600_000)
    assert store.promote_due() == 0
    wait_until(store, get(store, soon).scheduled_at_ms)
    assert store.promote_due() == 1
    chk.check()
    assert get(store, soon).state is State.AVAILABLE
    assert get(store, later).state is State.SCHEDULED
    with pytest.raises(InvalidInput):
        store.promote_due(limit=0)


def test_evict_retained_deletes_only_due_terminal_jobs(store: Store, client: Client,
                                                       chk: Checker) -> None:
    short = {"retention_ms": 50}
    completed = client.enqueue("work", b"c", **short)
    archived = client.enqueue("work", b"a", **short)
    kept = client.enqueue("work", b"k", retention_ms=3_600_000)
    claims = {c.job.id: c for c in chk.admit()}
    chk.ack(claims[completed], Outcome.SUCCESS)
    chk.ack(claims[archived], Outcome.SKIP)
    chk.ack(claims[kept], Outcome.SUCCESS)
    cancelled = client.enqueue("work", b"x", **short)
    store.operator_cancel(cancelled)
    waiting = client.enqueue("work", b"w", **short)
    # a quarantined job with a short retention is never evicted
    poison = client.enqueue("poison", b"p", queue="crash", **short)
    for _ in range(3):
        job = chk.lose(chk.one(lease_ms=30, queues=["crash"]))
        if job.state is State.RETRYABLE:
            store.reschedule_job(poison, 0)
    assert get(store, poison).state is State.QUARANTINED
    time.sleep(0.06)
    wait_until(store, store.now_ms() + 60)
    assert store.evict_retained() == 3
    chk.check()
    for gone in (completed, archived, cancelled):
        assert store.get_job(gone) is None
    for present in (kept, waiting, poison):
        assert store.get_job(present) is not None
    assert store.evict_retained() == 0


def test_reclaim_leaves_live_leases_alone(store: Store, client: Client, chk: Checker) -> None:
    client.enqueue("work", b"a")
    claim = chk.one(lease_ms=60_000)
    assert store.reclaim_expired() == 0
    assert get(store, claim.job.id).state is State.RUNNING
