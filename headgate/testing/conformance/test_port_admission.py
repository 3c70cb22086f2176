"""The admission gate (docs/ARCHITECTURE.md, Admission) on real stores: the fleet-wide
properties (a shared rate budget, fair partitions, quarantine, no double claim, the
store's clock), plus the eligibility rules and each policy."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict

import pytest

from headgate import Client, Envelope, Job, JobFilter, Outcome, State, Store, open_store
from headgate.core.records import WorkerBeat

Q = "default"


def enqueue_n(store: Store, n: int, **fields: object) -> list[str]:
    """Batch-enqueue `n` jobs with payload b"job-<i>"."""
    ids: list[str] = []
    envs = [Envelope(**{"kind": "work", "payload": f"job-{i}".encode(), **fields})  # type: ignore[arg-type]
            for i in range(n)]
    for i in range(0, n, 1000):
        ids += Client(store).enqueue_many(envs[i : i + 1000])
    return ids


def state_of(store: Store, job_id: str) -> State | None:
    job = store.get_job(job_id)
    return None if job is None else job.state


def rejections(store: Store, queue: str = Q) -> dict[str, int]:
    total: Counter[str] = Counter()
    for bucket in store.history(queue, 0, 60_000):
        total.update(asdict(bucket.admission_rejections))
    return dict(total)


def wait_store_ms(store: Store, ms: int) -> None:
    """Sleep until the store clock has moved `ms` forward."""
    until = store.now_ms() + ms
    while store.now_ms() < until:
        time.sleep(0.01)


# -- the fleet-wide properties --------------------------------------------------------------

def test_rate_class_5_per_second_burst_5(store: Store, open_more: Callable[[], Store]) -> None:
    # 5 per 3 s rather than per second: one token per 600 ms leaves a loaded machine
    # time between the two admits.
    store.upsert_rate_class("smtp", limit=5, window_ms=3_000, burst=5)
    enqueue_n(store, 20, rate_class="smtp")
    first = store.admit("worker-1", [Q], capacity=100)
    assert len(first) == 5
    other = open_more()  # a second worker, its own connection
    assert other.admit("worker-2", [Q], capacity=100) == []
    assert store.counts(Q)["available"] == 15
    assert rejections(store)["rate_class"] >= 1
    wait_store_ms(store, 3_000)
    again = other.admit("worker-2", [Q], capacity=100)
    assert len(again) == 5
    assert not {c.job.id for c in first} & {c.job.id for c in again}
    assert store.counts(Q)["running"] == 10 and store.counts(Q)["available"] == 10


def test_noisy_partition_cannot_hide_quiet_ones(store: Store) -> None:
    enqueue_n(store, 5000, partition_key="noisy")
    enqueue_n(store, 3, partition_key="a")
    enqueue_n(store, 3, partition_key="b")
    claims = store.admit("w", [Q], capacity=9, quantum=3)
    assert Counter(c.job.partition_key for c in claims) == {"noisy": 3, "a": 3, "b": 3}


def test_quarantined_fingerprint_is_skipped(
    store: Store, quarantine: Callable[[Store, str, bytes], str]
) -> None:
    client = Client(store)
    bad = [client.enqueue("poison", b"same bytes") for _ in range(5)]
    good = enqueue_n(store, 5)
    fp = quarantine(store, "poison", b"same bytes")  # a crasher elsewhere, 3 lost leases
    claims = store.admit("w", [Q], capacity=100)
    assert sorted(c.job.id for c in claims) == sorted(good)
    for job_id in bad:
        job = store.get_job(job_id)
        assert job is not None and job.state is State.AVAILABLE and job.fingerprint == fp
        assert job.lease_id is None
    assert store.counts(Q)["available"] == 5
    assert rejections(store)["quarantine"] == 5


def _check_claims_exclusive(store: Store, results: list[list[str]], all_ids: list[str],
                            all_jobs: Callable[..., list[Job]]) -> None:
    claimed = [job_id for ids in results for job_id in ids]
    assert len(claimed) == len(set(claimed)), "a job was claimed twice"
    assert set(claimed) == set(all_ids)
    jobs = all_jobs(store)
    running = {j.id for j in jobs if j.state is State.RUNNING}
    assert running == set(claimed)
    for job in jobs:
        assert (job.lease_id is not None) == (job.state is State.RUNNING), job.id
        assert (job.lease_expires_at_ms is not None) == (job.state is State.RUNNING), job.id
        assert job.fence == 1
    assert store.counts(Q)["running"] == 500 and store.counts(Q)["available"] == 0


def test_eight_threads_never_claim_a_job_twice(
    store: Store, all_jobs: Callable[..., list[Job]]
) -> None:
    ids = enqueue_n(store, 500, partition_key="p")
    barrier = threading.Barrier(8)
    results: list[list[str]] = [[] for _ in range(8)]
    errors: list[BaseException] = []

    def admitter(i: int) -> None:
        try:
            barrier.wait()
            while True:
                claims = store.admit(f"thread-{i}", [Q], capacity=80)
                if not claims:
                    return
                results[i] += [c.job.id for c in claims]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=admitter, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    _check_claims_exclusive(store, results, ids, all_jobs)


def _process_admitter(url: str, worker: str, start: multiprocessing.synchronize.Event,
                      out: multiprocessing.Queue) -> None:
    store = open_store(url, migrate=False)
    try:
        start.wait(60)
        claimed: list[str] = []
        while True:
            claims = store.admit(worker, [Q], capacity=80)
            if not claims:
                break
            claimed += [c.job.id for c in claims]
        out.put((worker, claimed, None))
    except BaseException as exc:  # noqa: BLE001 - sent to the parent
        out.put((worker, [], repr(exc)))
    finally:
        store.close()


def test_eight_processes_never_claim_a_job_twice(
    store: Store, store_url: str, all_jobs: Callable[..., list[Job]]
) -> None:
    ids = enqueue_n(store, 500, partition_key="p")
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    out: multiprocessing.Queue = ctx.Queue()
    procs = [
        ctx.Process(target=_process_admitter, args=(store_url, f"proc-{i}", start, out))
        for i in range(8)
    ]
    for p in procs:
        p.start()
    start.set()
    reports = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert [r[2] for r in reports if r[2]] == []
    _check_claims_exclusive(store, [r[1] for r in reports], ids, all_jobs)


def test_lease_expiry_follows_the_store_clock(store: Store) -> None:
    (job_id,) = enqueue_n(store, 1)
    before = store.now_ms()
    (claim,) = store.admit("w", [Q], capacity=1, lease_ms=400)
    after = store.now_ms()
    assert before + 400 <= claim.lease_expires_at_ms <= after + 400
    job = store.get_job(job_id)
    assert job is not None and job.lease_expires_at_ms == claim.lease_expires_at_ms
    assert job.attempted_at_ms is not None
    assert claim.lease_expires_at_ms == job.attempted_at_ms + 400
    assert store.reclaim_expired() == 0  # not yet expired
    assert store.renew([claim], lease_ms=400) == []  # and still renewable
    expires = store.get_job(job_id).lease_expires_at_ms  # type: ignore[union-attr]
    assert expires is not None and expires >= claim.lease_expires_at_ms
    while store.reclaim_expired() == 0:
        assert store.now_ms() <= expires + 5_000, "lease not reclaimed within 5 s of expiry"
        time.sleep(0.02)
    assert store.now_ms() > expires
    job = store.get_job(job_id)
    assert job is not None and job.state is State.RETRYABLE and job.crash_attempt == 1
    assert store.renew([claim], lease_ms=400) == [claim]


# -- eligibility ------------------------------------------------------------------------

def test_paused_queue_admits_nothing(store: Store) -> None:
    enqueue_n(store, 3)
    store.set_queue_paused(Q, True)
    assert store.admit("w", [Q], capacity=10) == []
    assert store.counts(Q)["available"] == 3
    store.set_queue_paused(Q, False)
    assert len(store.admit("w", [Q], capacity=10)) == 3


def test_pending_is_never_admitted(store: Store) -> None:
    client = Client(store)
    job_id = client.enqueue("work", b"p", pending=True)
    assert state_of(store, job_id) is State.PENDING
    assert store.admit("w", [Q], capacity=10) == []
    assert store.promote_due() == 0
    assert state_of(store, job_id) is State.PENDING
    store.promote_job(job_id)
    assert [c.job.id for c in store.admit("w", [Q], capacity=10)] == [job_id]


def test_sticky_worker_only_for_that_worker(store: Store) -> None:
    client = Client(store)
    job_id = client.enqueue("work", b"p", sticky_worker="w-7")
    assert store.admit("w-1", [Q], capacity=10) == []
    assert state_of(store, job_id) is State.AVAILABLE
    (claim,) = store.admit("w-7", [Q], capacity=10)
    assert claim.job.id == job_id and claim.job.sticky_worker == "w-7"
    job = store.get_job(job_id)
    assert job is not None and job.worker_id == "w-7"


def test_only_the_callers_queues_are_served(store: Store) -> None:
    client = Client(store)
    client.enqueue("work", b"1", queue="other")
    mine = client.enqueue("work", b"2", queue="mine")
    assert [c.job.id for c in store.admit("w", ["mine"], capacity=10)] == [mine]


# -- queue weights ----------------------------------------------------------------------

def test_queue_weights_split_capacity(store: Store) -> None:
    enqueue_n(store, 20, queue="heavy")
    enqueue_n(store, 20, queue="light")
    store.set_queue_weight("heavy", 3)
    store.set_queue_weight("light", 1)
    claims = store.admit("w", ["light", "heavy"], capacity=8)
    assert Counter(c.job.queue for c in claims) == {"heavy": 6, "light": 2}


def test_unused_queue_share_flows_to_the_other_queue(store: Store) -> None:
    enqueue_n(store, 1, queue="heavy")
    enqueue_n(store, 20, queue="light")
    store.set_queue_weight("heavy", 3)
    store.set_queue_weight("light", 1)
    claims = store.admit("w", ["heavy", "light"], capacity=8)
    assert Counter(c.job.queue for c in claims) == {"heavy": 1, "light": 7}


def test_small_share_queue_still_gets_spare_capacity(store: Store) -> None:
    """capacity 1 over weights 3:1 gives the light queue a share of 0; when the heavy
    queue is empty the light one must still be served (work-conserving)."""
    store.set_queue_weight("heavy", 3)
    store.set_queue_weight("light", 1)
    (job_id,) = enqueue_n(store, 1, queue="light")
    assert [c.job.id for c in store.admit("w", ["heavy", "light"], capacity=1)] == [job_id]


def test_weight_does_not_override_priority_within_a_partition(store: Store) -> None:
    client = Client(store)
    low = [client.enqueue("work", f"l{i}".encode(), priority=0) for i in range(3)]
    high = [client.enqueue("work", f"h{i}".encode(), priority=5) for i in range(3)]
    claims = store.admit("w", [Q], capacity=4)
    assert [c.job.id for c in claims][:3] == high
    assert claims[3].job.id == low[0]


# -- fairness ---------------------------------------------------------------------------

def test_priority_orders_within_a_partition(store: Store) -> None:
    client = Client(store)
    ids = [client.enqueue("work", str(i).encode(), priority=p)
           for i, p in enumerate((1, -3, 7, 0, 7))]
    claims = store.admit("w", [Q], capacity=4)
    assert [c.job.priority for c in claims] == [7, 7, 1, 0]
    # equal priority: arrival order
    assert [c.job.id for c in claims] == [ids[2], ids[4], ids[0], ids[3]]


def test_priority_does_not_cross_partitions(store: Store) -> None:
    enqueue_n(store, 5, partition_key="vip", priority=100)
    enqueue_n(store, 5, partition_key="plain", priority=0)
    claims = store.admit("w", [Q], capacity=4)
    assert Counter(c.job.partition_key for c in claims) == {"vip": 2, "plain": 2}


def test_fairness_is_work_conserving(store: Store) -> None:
    enqueue_n(store, 50, partition_key="alone")
    assert len(store.admit("w", [Q], capacity=30)) == 30
    assert len(store.admit("w", [Q], capacity=30, quantum=2)) == 20


def test_spare_capacity_goes_to_partitions_with_work(store: Store) -> None:
    enqueue_n(store, 1, partition_key="a")
    enqueue_n(store, 2, partition_key="b")
    enqueue_n(store, 100, partition_key="c")
    claims = store.admit("w", [Q], capacity=30)
    assert Counter(c.job.partition_key for c in claims) == {"a": 1, "b": 2, "c": 27}


def test_fairness_rotates_between_calls(store: Store) -> None:
    for key in ("a", "b", "c"):
        enqueue_n(store, 10, partition_key=key)
    seen: Counter[str] = Counter()
    for _ in range(3):
        claims = store.admit("w", [Q], capacity=2, quantum=1)
        assert len(claims) == 2
        seen.update(c.job.partition_key for c in claims)
    assert seen == {"a": 2, "b": 2, "c": 2}


# -- rate classes -----------------------------------------------------------------------

def test_job_weight_spends_tokens(store: Store) -> None:
    store.upsert_rate_class("api", limit=10, window_ms=60_000, burst=10)
    enqueue_n(store, 5, rate_class="api", weight=3)
    claims = store.admit("w", [Q], capacity=10)
    assert len(claims) == 3  # 9 of 10 tokens; the 4th needs 3 and 1 is left
    (rc,) = [r for r in store.rate_classes() if r.name == "api"]
    assert 0.9 <= rc.tokens_available < 1.1


def test_rate_class_is_shared_across_queues(store: Store) -> None:
    store.upsert_rate_class("shared", limit=4, window_ms=60_000, burst=4)
    enqueue_n(store, 10, queue="q1", rate_class="shared")
    enqueue_n(store, 10, queue="q2", rate_class="shared")
    assert len(store.admit("w1", ["q1"], capacity=10)) == 4
    assert store.admit("w2", ["q2"], capacity=10) == []


def test_paused_rate_class_admits_nothing(store: Store) -> None:
    store.upsert_rate_class("smtp", limit=100, window_ms=1000, burst=100, paused=True)
    enqueue_n(store, 3, rate_class="smtp")
    free = enqueue_n(store, 2)
    assert sorted(c.job.id for c in store.admit("w", [Q], capacity=10)) == sorted(free)
    assert store.counts(Q)["available"] == 3
    store.upsert_rate_class("smtp", limit=100, window_ms=1000, burst=100, paused=False)
    assert len(store.admit("w", [Q], capacity=10)) == 3


def test_unknown_rate_class_does_not_block(store: Store) -> None:
    enqueue_n(store, 2, rate_class="never-configured")
    assert len(store.admit("w", [Q], capacity=10)) == 2


# -- concurrency ceilings ---------------------------------------------------------------

def test_ceiling_queue_leaves_jobs_available(store: Store) -> None:
    store.upsert_concurrency_limit("one", queue=Q, max_concurrent=1, on_saturated="queue")
    ids = enqueue_n(store, 3, partition_key="t")
    other = enqueue_n(store, 1, partition_key="u")
    claims = store.admit("w", [Q], capacity=10)
    assert sorted(c.job.id for c in claims) == sorted([ids[0], other[0]])
    assert store.admit("w", [Q], capacity=10) == []
    assert [state_of(store, i) for i in ids[1:]] == [State.AVAILABLE] * 2
    # Each pass turns partition t's head job away at the full ceiling: one job held.
    assert rejections(store)["concurrency_limit"] >= 1
    store.ack(claims[0] if claims[0].job.id == ids[0] else claims[1], Outcome.SUCCESS)
    assert [c.job.id for c in store.admit("w", [Q], capacity=10)] == [ids[1]]


def test_ceiling_applies_to_the_empty_partition_too(store: Store) -> None:
    store.upsert_concurrency_limit("two", queue=Q, max_concurrent=2)
    enqueue_n(store, 5)
    assert len(store.admit("w", [Q], capacity=10)) == 2


def test_ceiling_holds_across_the_work_conserving_pass(store: Store) -> None:
    """A queue served twice in one admit (its share, then what an empty queue left)
    counts what its first pass claimed against the ceiling."""
    store.upsert_concurrency_limit("two", queue="capped", max_concurrent=2)
    enqueue_n(store, 5, queue="capped")
    enqueue_n(store, 1, queue="idle")  # the queue exists and is active, then empties
    (drained,) = store.admit("w", ["idle"], capacity=1)
    store.ack(drained, Outcome.SUCCESS)
    claims = store.admit("w", ["capped", "idle"], capacity=4)
    assert [c.job.queue for c in claims] == ["capped", "capped"]


def test_fairness_credit_carries_into_the_work_conserving_pass(store: Store) -> None:
    """The second pass over a queue in one admit starts from the deficits its first pass
    left, not from the stored ones: p1 keeps 1 of its quantum of 3 after taking 2, p2
    runs dry, and p1 then takes 1 more with 1 + 3 credit, leaving 3."""
    enqueue_n(store, 5, queue="fair", partition_key="p1")
    enqueue_n(store, 1, queue="fair", partition_key="p2")
    enqueue_n(store, 1, queue="idle")  # the queue exists and is active, then empties
    (drained,) = store.admit("w", ["idle"], capacity=1)
    store.ack(drained, Outcome.SUCCESS)
    claims = store.admit("w", ["fair", "idle"], capacity=4, quantum=3)
    assert Counter(c.job.partition_key for c in claims) == {"p1": 3, "p2": 1}
    deficits = {p.partition_key: p.deficit for p in store.partitions("fair")}
    assert deficits["p1"] == 3


def test_ceiling_discard_deletes_the_incoming_job(store: Store) -> None:
    store.upsert_concurrency_limit("one", queue=Q, max_concurrent=1, on_saturated="discard")
    ids = enqueue_n(store, 3, partition_key="t")
    claims = store.admit("w", [Q], capacity=10)
    assert [c.job.id for c in claims] == [ids[0]]
    assert store.get_job(ids[1]) is None and store.get_job(ids[2]) is None
    assert store.counts(Q)["available"] == 0 and store.counts(Q)["running"] == 1
    assert rejections(store)["concurrency_limit"] == 2


def test_ceiling_cancel_incoming_cancels_with_a_reason(store: Store) -> None:
    store.upsert_concurrency_limit("one", queue=Q, max_concurrent=1,
                                   on_saturated="cancel_incoming")
    ids = enqueue_n(store, 2, partition_key="t")
    claims = store.admit("w", [Q], capacity=10)
    assert [c.job.id for c in claims] == [ids[0]]
    job = store.get_job(ids[1])
    assert job is not None and job.state is State.CANCELLED and job.lease_id is None
    assert job.errors and "one" in job.errors[-1]["error"]
    assert "concurrency" in job.errors[-1]["error"]
    assert store.counts(Q)["cancelled"] == 1
    assert rejections(store)["concurrency_limit"] == 1


def test_ceiling_cancel_running_makes_room(store: Store) -> None:
    store.upsert_concurrency_limit("one", queue=Q, max_concurrent=1,
                                   on_saturated="cancel_running")
    (old_id,) = enqueue_n(store, 1, partition_key="t")
    (old,) = store.admit("w", [Q], capacity=10)
    newer = enqueue_n(store, 1, partition_key="t")
    unrelated = enqueue_n(store, 1, partition_key="u")
    claims = store.admit("w", [Q], capacity=10)
    assert sorted(c.job.id for c in claims) == sorted(newer + unrelated)
    job = store.get_job(old_id)
    assert job is not None and job.state is State.CANCELLED
    assert job.cancel_requested and job.lease_id is None
    assert "one" in job.errors[-1]["error"]
    assert store.heartbeat(WorkerBeat("w"), [old]).cancelled == (old,)
    with pytest.raises(Exception) as info:
        store.ack(old, Outcome.SUCCESS)
    assert type(info.value).__name__ == "LeaseLost"
    assert store.counts(Q)["running"] == 2


def test_ceiling_only_limits_its_queue(store: Store) -> None:
    store.upsert_concurrency_limit("one", queue="limited", max_concurrent=1)
    enqueue_n(store, 3, queue="limited")
    enqueue_n(store, 3, queue="free")
    claims = store.admit("w", ["limited", "free"], capacity=10)
    assert Counter(c.job.queue for c in claims) == {"limited": 1, "free": 3}


def test_rejections_are_counted_per_policy(
    store: Store, quarantine: Callable[[Store, str, bytes], str]
) -> None:
    client = Client(store)
    client.enqueue("poison", b"x")
    quarantine(store, "poison", b"x")
    store.upsert_rate_class("paused", limit=1, window_ms=1000, paused=True)
    client.enqueue("work", b"r", rate_class="paused")
    store.upsert_concurrency_limit("one", queue=Q, max_concurrent=1)
    enqueue_n(store, 2, partition_key="c")
    store.admit("w", [Q], capacity=10)
    got = rejections(store)
    assert got["quarantine"] == 1
    assert got["rate_class"] == 1
    assert got["concurrency_limit"] == 1
    history = store.history(Q, 0, 60_000)
    assert history and set(asdict(history[-1].admission_rejections)) == {
        "rate_class", "concurrency_limit", "quarantine"}


def test_rejections_count_jobs_held_back_not_polls(store: Store) -> None:
    """Every poll passes over the same waiting jobs: the history keeps, per minute, the
    most jobs one pass turned away, so twenty polls of 3 held jobs count 3, not 60."""
    store.upsert_rate_class("smtp", limit=1, window_ms=1000, paused=True)
    enqueue_n(store, 3, rate_class="smtp")
    for _ in range(20):
        assert store.admit("w", [Q], capacity=10) == []
    per_minute = [b.admission_rejections.rate_class for b in store.history(Q, 0, 60_000)]
    assert max(per_minute) == 3 and set(per_minute) <= {0, 3}
    enqueue_n(store, 2, rate_class="smtp")  # more held back: the minute's figure grows
    store.admit("w", [Q], capacity=10)
    assert max(b.admission_rejections.rate_class
               for b in store.history(Q, 0, 60_000)) == 5


# -- promotion, leases and fences ----------------------------------------------------------

def test_due_scheduled_jobs_are_promoted_inside_admit(store: Store) -> None:
    client = Client(store)
    job_id = client.enqueue("work", b"s", scheduled_at_ms=store.now_ms() + 1_000)
    assert state_of(store, job_id) is State.SCHEDULED
    assert store.admit("w", [Q], capacity=10) == []
    wait_store_ms(store, 1_010)
    assert state_of(store, job_id) is State.SCHEDULED  # nobody promoted it yet
    assert [c.job.id for c in store.admit("w", [Q], capacity=10)] == [job_id]


def test_due_retryable_jobs_are_promoted_inside_admit(store: Store) -> None:
    (job_id,) = enqueue_n(store, 1)
    (claim,) = store.admit("w", [Q], capacity=10)
    store.ack(claim, Outcome.RETRY, error="flaky", delay_ms=100)
    assert state_of(store, job_id) is State.RETRYABLE
    assert store.admit("w", [Q], capacity=10) == []
    wait_store_ms(store, 110)
    (again,) = store.admit("w", [Q], capacity=10)
    assert again.job.id == job_id and again.job.attempt == 1 and again.fence == 2


def test_one_lease_id_per_call_and_a_fence_per_job(store: Store) -> None:
    enqueue_n(store, 6)
    first = store.admit("w", [Q], capacity=3)
    second = store.admit("w", [Q], capacity=3)
    assert len({c.lease_id for c in first}) == 1
    assert len({c.lease_id for c in second}) == 1
    assert first[0].lease_id != second[0].lease_id
    for claim in first + second:
        assert claim.fence == claim.job.fence == 1
        assert claim.job.state is State.RUNNING and claim.job.lease_id == claim.lease_id
        assert claim.job.payload is not None and claim.job.payload.startswith(b"job-")
    store.ack(first[0], Outcome.RATE_LIMITED)
    (readmitted,) = store.admit("w", [Q], capacity=1)
    assert readmitted.job.id == first[0].job.id and readmitted.fence == 2


def test_capacity_zero_admits_nothing(store: Store) -> None:
    enqueue_n(store, 2)
    assert store.admit("w", [Q], capacity=0) == []
    assert store.counts(Q)["available"] == 2


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"capacity": -1}, "capacity"),
        ({"capacity": True}, "capacity"),
        ({"lease_ms": 0}, "lease_ms must be an integer >= 1"),
        ({"quantum": 0}, "quantum"),
        ({"queues": []}, "queues"),
        ({"queues": "default"}, "queues"),
        ({"worker_id": ""}, "worker_id"),
    ],
)
def test_admit_rejects_bad_arguments(store: Store, kwargs: dict, needle: str) -> None:
    args = {"worker_id": "w", "queues": [Q], "capacity": 1, **kwargs}
    with pytest.raises(Exception) as info:
        store.admit(**args)
    assert type(info.value).__name__ == "InvalidInput"
    assert needle in str(info.value)


def test_claims_carry_full_jobs(store: Store) -> None:
    client = Client(store)
    job_id = client.enqueue("email.send", b'{"to": 1}', partition_key="acme", rate_class="",
                            tags=["b", "a"], headers={"traceparent": "t"})
    (claim,) = store.admit("w", [Q], capacity=1)
    job = claim.job
    assert (job.id, job.kind, job.partition_key, job.payload) == (
        job_id, "email.send", "acme", b'{"to": 1}')
    assert job.tags == ("a", "b") and job.headers == {"traceparent": "t"}
    listed = store.list_jobs(JobFilter(state="running")).jobs
    assert [j.id for j in listed] == [job_id]
