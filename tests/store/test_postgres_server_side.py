"""PostgreSQL's server-side admission and acks (headgate/db/postgres/functions/admit.sql).

The function must decide exactly what SQLite's Python admission decides
(adapters/sqlite/admission.py, engine-neutral SQL, run here on a PostgreSQL
connection): a differential test replays the same random scenarios through both, each on
its own fresh database, and compares every claim and every piece of persisted policy
state. The rest covers what the store-level suites do not: lost leases and the other
effects of plain successes applied inside the combined call.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import (
    jobs_index_reads,
    jobs_index_reads_since,
    pg_available,
    pg_database,
    wait_for,
    with_database,
)

import headgate
from headgate import Envelope, Outcome, State, open_store
from headgate.adapters.sqlite import admission as python_admission
from headgate.core import AckRequest, Claim
from headgate.core.adaptive import Adaptive
from headgate.core.schema_constants import HISTORY_BUCKET_MS

pytestmark = pytest.mark.skipif(not pg_available(), reason="HG_TEST_PG not set")

QUEUES = ("qa", "qb", "qc")
# Few partitions make ceilings bind; many make the shared admission page through a
# queue's partitions (a page holds about what one round needs) past blocked ones.
FEW_KEYS = ("", "p1", "p2", "p3")
MANY_KEYS = ("", *(f"p{i:02d}" for i in range(1, 15)))
STRATEGIES = ("queue", "discard", "cancel_incoming", "cancel_running")


def clear_of_a_history_edge(margin_s: float = 1.0) -> None:
    """Wait past the next history bucket's start when it is under `margin_s` away, so
    both sides of a round write the same bucket. A bucket keeps each rejection count at
    the largest one pass made, so a round whose two sides fell in different minutes
    would sum to different totals while deciding alike."""
    to_edge = HISTORY_BUCKET_MS - time.time() * 1000 % HISTORY_BUCKET_MS
    if to_edge < margin_s * 1000:
        time.sleep(to_edge / 1000 + 0.01)


@pytest.fixture
def twin_urls() -> Iterator[tuple[str, str]]:
    for first in pg_database():
        for second in pg_database():
            yield first, second


class Side:
    """One database driven either through the function or through the shared Python."""

    def __init__(self, url: str, server: bool) -> None:
        self.url = url
        self.server = server
        self.store: Any = open_store(url, notify=False)
        self.store.plain_retry_s = 0.0  # every admit tries the plain statement first
        self.held: dict[bytes, Claim] = {}

    def ack_and_admit(self, acks: list[bytes], worker: str, queues: list[str],
                      capacity: int, quantum: int | None) -> tuple[list[bytes], list[bytes]]:
        requests = [AckRequest(self.held[p], "success") for p in acks]
        if self.server:
            lost, claims = self.store.ack_and_admit(requests, worker, queues, capacity,
                                                    30_000, quantum)
        else:
            with self.store.db.write() as (conn, now):
                conn.dialect.lock_queues(
                    conn, sorted({r.claim.job.queue for r in requests} | set(queues)))
                lost, _ = self.store._apply_acks(conn, now, requests)
                claims = python_admission.admit(conn, now, worker, queues, capacity, 30_000,
                                                quantum)
        acked = {self.held.pop(p).job.id: p for p in acks}
        for c in claims:
            assert c.job.payload is not None
            self.held[c.job.payload] = c
        return sorted(acked[i] for i in lost), [c.job.payload for c in claims]  # type: ignore[misc]

    def admit(self, worker: str, queue: str, capacity: int) -> list[bytes]:
        """A pure admit from one queue: the plain statement of the server side, where
        no policy has a say (else the function), against the shared Python."""
        if self.server:
            claims = self.store.admit(worker, [queue], capacity, 30_000)
        else:
            with self.store.db.write() as (conn, now):
                conn.dialect.lock_queues(conn, [queue])
                claims = python_admission.admit(conn, now, worker, [queue], capacity, 30_000,
                                                None)
        for c in claims:
            assert c.job.payload is not None
            self.held[c.job.payload] = c
        return [c.job.payload for c in claims]  # type: ignore[misc]

    def snapshot(self) -> dict[str, Any]:
        with psycopg.connect(self.url) as conn:
            jobs = conn.execute(
                "SELECT payload, state, fence, attempt, cancel_requested, lease_id IS NULL, "
                "errors::jsonb FROM jobs ORDER BY payload").fetchall()
            jobs = [(*row[:6], [(e["error"], e["outcome"]) for e in row[6]]) for row in jobs]
            return {
                "jobs": jobs,
                "partitions": conn.execute(
                    "SELECT queue, partition_key, waiting, running, deficit FROM partitions "
                    "ORDER BY 1, 2").fetchall(),
                "queues": conn.execute(
                    "SELECT name, rr_cursor FROM queues ORDER BY 1").fetchall(),
                "rates": conn.execute(
                    "SELECT name, round(tokens::numeric, 6) FROM rate_classes ORDER BY 1"
                ).fetchall(),
                "history": conn.execute(
                    "SELECT queue, sum(completed), sum(rejected_rate_class), "
                    "sum(rejected_concurrency_limit), sum(rejected_quarantine) "
                    "FROM queue_history GROUP BY queue ORDER BY 1").fetchall(),
                "counts": conn.execute(
                    "SELECT queue, state, n FROM queue_counts WHERE n <> 0 ORDER BY 1, 2"
                ).fetchall(),
            }


def _setup(side: Side, rng: random.Random, strategy: str, keys: tuple[str, ...]) -> None:
    store = side.store
    for q in QUEUES:
        store.set_queue_weight(q, rng.randint(1, 3))
    # Windows so long that refill between the two databases' calls is below rounding.
    store.upsert_rate_class("scarce", limit=4, window_ms=10**12, burst=4)
    store.upsert_rate_class("stopped", limit=4, window_ms=10**12, burst=4, paused=True)
    store.upsert_rate_class("ample", limit=1000, window_ms=10**15, burst=1000)
    store.upsert_concurrency_limit("cap-qa", "qa", 2, strategy)
    store.upsert_concurrency_limit("cap-qb", "qb", 3, "queue")
    envs = []
    for i in range(90):
        envs.append(Envelope(
            kind="poison" if i % 17 == 0 else "work", payload=b"job-%03d" % i,
            queue=rng.choice(QUEUES), partition_key=rng.choice(keys),
            priority=rng.choice((0, 0, 1, 5)),
            rate_class=rng.choice(("", "", "scarce", "stopped", "ample", "unknown")),
            weight=rng.choice((1, 1, 2)), sticky_worker=rng.choice(("",) * 6 + ("w1",)),
            retention_ms=rng.choice((None, None, None, 0)),
        ))
    headgate.Client(store).enqueue_many(envs)
    with psycopg.connect(side.url) as conn:
        conn.execute(
            "INSERT INTO quarantine (fingerprint, kind, crash_count, quarantined_at_ms, reason) "
            "VALUES (%s, 'poison', 3, 0, 'test')",
            (headgate.fingerprint("poison", b"job-017"),))


@pytest.mark.parametrize("seed", range(12))
def test_function_decides_exactly_as_the_shared_admission(
    twin_urls: tuple[str, str], seed: int
) -> None:
    server, shared = Side(twin_urls[0], True), Side(twin_urls[1], False)
    try:
        strategy = STRATEGIES[seed % len(STRATEGIES)]
        for side in (server, shared):
            _setup(side, random.Random(seed), strategy, MANY_KEYS if seed % 3 == 2 else FEW_KEYS)
        rng = random.Random(1000 + seed)
        for round_no in range(16):
            clear_of_a_history_edge()
            held = sorted(server.held)
            acks = rng.sample(held, rng.randint(0, len(held))) if held else []
            for side in (server, shared):
                if round_no == 6:
                    side.store.set_queue_paused("qb", True)
                if round_no == 9:  # below what runs now: acks and ceilings in one call
                    side.store.upsert_concurrency_limit("cap-qa", "qa", 1, strategy)
            queues = rng.sample(QUEUES + ("qa", "missing"), rng.randint(1, 4))
            worker = rng.choice(("w1", "w2"))
            capacity = rng.randint(0, 7)
            quantum = rng.choice((None, None, 1, 2))
            got = [side.ack_and_admit(acks, worker, queues, capacity, quantum)
                   for side in (server, shared)]
            assert got[0] == got[1], (round_no, queues, capacity, quantum)
            assert server.snapshot() == shared.snapshot(), round_no
            # Distinct claim instants, so "oldest running" orders alike on both sides.
            time.sleep(0.003)
    finally:
        server.store.close()
        shared.store.close()


@pytest.mark.parametrize("seed", range(8))
def test_a_one_queue_admit_decides_exactly_as_the_shared_admission(
    twin_urls: tuple[str, str], seed: int
) -> None:
    """Mostly the early exit's case (one partition, no policy), a pure admit or one with
    the worker's acks; now and then a second partition, a rate class, another worker's
    sticky job, a due job, a pause, a ceiling, a quarantine or an ack that deletes its
    job (retention 0), where the same statement hands over to the policy block."""
    server, shared = Side(twin_urls[0], True), Side(twin_urls[1], False)
    rng = random.Random(seed)
    try:
        for side in (server, shared):
            side.store.upsert_rate_class("ample", limit=1000, window_ms=10**15, burst=1000)
        for round_no in range(24):
            clear_of_a_history_edge()
            envs = [Envelope(
                kind="work", payload=b"job-%02d-%d" % (round_no, i), queue="solo",
                priority=rng.choice((0, 0, 0, 3)),
                partition_key="" if rng.random() < 0.9 else "other",
                rate_class="" if rng.random() < 0.9 else rng.choice(("ample", "unknown")),
                sticky_worker="" if rng.random() < 0.9 else rng.choice(("w1", "w2")),
                scheduled_at_ms=0 if rng.random() < 0.95 else 1,  # 1: due at once
                retention_ms=None if rng.random() < 0.9 else 0,
            ) for i in range(rng.randint(0, 4))]
            held = sorted(server.held)
            acks = rng.sample(held, rng.randint(0, len(held))) if held else []
            worker = rng.choice(("w1", "w1", "w2"))
            capacity = rng.randint(1, 5)
            if round_no % 2:  # the worker's steady state: acks and claims in one call
                for side in (server, shared):
                    side.store.enqueue_many(envs)
                got = [side.ack_and_admit(acks, worker, ["solo"], capacity, None)
                       for side in (server, shared)]
                assert got[0] == got[1], (round_no, worker, capacity)
                assert server.snapshot() == shared.snapshot(), round_no
                time.sleep(0.003)
                continue
            for side in (server, shared):
                side.store.enqueue_many(envs)
                side.ack_and_admit(acks, "w1", ["solo"], 0, None)  # acks only
                if round_no == 8:
                    side.store.set_queue_paused("solo", True)
                if round_no == 10:
                    side.store.set_queue_paused("solo", False)
                if round_no == 14:
                    side.store.upsert_concurrency_limit("cap", "solo", 3, "queue")
                if round_no == 18:
                    with psycopg.connect(side.url) as conn:
                        conn.execute(
                            "INSERT INTO quarantine (fingerprint, kind, crash_count, "
                            "quarantined_at_ms, reason) VALUES ('fp', 'work', 3, 0, 't')")
            got = [side.admit(worker, "solo", capacity) for side in (server, shared)]
            assert got[0] == got[1], (round_no, worker, capacity)
            assert server.snapshot() == shared.snapshot(), round_no
            time.sleep(0.003)
    finally:
        server.store.close()
        shared.store.close()


def test_the_early_exit_claims_alone_and_hands_over_to_the_policy_block(
    pg_url: str,
) -> None:
    """An admit no policy has a say in is decided by the function's early exit; one with
    a rate class in play (or an unknown queue) declines it, which the caller remembers
    for a while (no check first), then tries the early exit again. The differential
    test above compares both paths' decisions, this shows which one ran."""
    store = open_store(pg_url, notify=False)
    try:
        _enqueue(store, 3, "plain")
        _enqueue(store, 2, "classed", rate_class="ample")
        store.upsert_rate_class("ample", limit=1000, window_ms=10**15, burst=1000)
        claims = store.admit("w", ["plain"], 2)
        assert [c.job.state for c in claims] == [State.RUNNING, State.RUNNING]
        assert len(store.admit("w", ["plain"], 2)) == 1
        assert store.admit("w", ["plain"], 2) == []  # known and empty: still plain
        assert store._policy_bound == {}
        assert len(store.admit("w", ["classed"], 2)) == 2  # a rate class in play
        store.admit("w", ["unknown"], 2)  # no such queue
        assert set(store._policy_bound) == {"classed", "unknown"}
        store.plain_retry_s = 0.5
        head = _enqueue(store, 1, "plain", rate_class="ample", priority=9)[0]
        assert [c.job.id for c in store.admit("w", ["plain"], 1)] == [head]
        assert "plain" in store._policy_bound
        store._policy_bound["plain"] = time.monotonic() - 1  # the while is over
        _enqueue(store, 1, "plain")
        assert len(store.admit("w", ["plain"], 1)) == 1
        assert store._policy_bound["plain"] < time.monotonic()  # plain again: not renewed
    finally:
        store.close()


def _enqueue(store: Any, n: int, queue: str, **fields: Any) -> list[str]:
    return headgate.Client(store).enqueue_many(
        [Envelope(kind="k", payload=b"%d" % i, queue=queue, **fields) for i in range(n)])


def test_the_early_exit_takes_a_workers_acks_with_its_claims(pg_url: str) -> None:
    """A worker's steady state (plain successes of the queue it admits from, then the
    next claims) is the early exit's; an ack that is lost, or deletes its job, or
    belongs to another queue hands the call over to the policy block, which reports
    the loss as before."""
    store = open_store(pg_url, notify=False)
    try:
        _enqueue(store, 6, "steady")
        first = store.admit("w", ["steady"], 2)
        lost, second = store.ack_and_admit(
            [AckRequest(c, "success", result=b"r") for c in first], "w", ["steady"], 2)
        assert lost == [] and len(second) == 2 and store._policy_bound == {}
        for c in first:
            job = store.get_job(c.job.id)
            assert job is not None and job.state == State.COMPLETED
        with psycopg.connect(pg_url) as conn:
            assert conn.execute(
                "SELECT sum(completed) FROM queue_history WHERE queue = 'steady'"
            ).fetchone()[0] == 2
        lost, third = store.ack_and_admit([AckRequest(second[0], "success")], "w",
                                          ["steady"], 1)
        assert lost == [] and len(third) == 1 and store._policy_bound == {}
        # second[0] again: acked already, so lost; the policy block still claims the last
        lost, fourth = store.ack_and_admit([AckRequest(second[0], "success")], "w",
                                           ["steady"], 2)
        assert lost == [second[0].job.id] and len(fourth) == 1
        assert "steady" in store._policy_bound  # declined: the lost ack
        store._policy_bound.clear()
        gone = _enqueue(store, 1, "brief", retention_ms=0)[0]
        claim = store.admit("w", ["brief"], 1)
        assert [c.job.id for c in claim] == [gone]
        lost, _ = store.ack_and_admit([AckRequest(claim[0], "success")], "w", ["brief"], 1)
        assert lost == [] and store.get_job(gone) is None
        assert "brief" in store._policy_bound  # declined: the ack deletes its job
    finally:
        store.close()


def test_the_early_exit_reads_the_clock_once_it_holds_the_queue(pg_url: str) -> None:
    """A claim made after waiting for the queue's lock is dated from when it got the
    lock, not from before the wait: its lease runs its full length."""
    store: Any = open_store(pg_url, notify=False)
    try:
        _enqueue(store, 1, "dated")
        with psycopg.connect(pg_url) as locker, \
                psycopg.connect(pg_url, autocommit=True) as keeper:
            locker.execute("SELECT pg_advisory_xact_lock("
                           "hashtextextended('dated', headgate_queue_lock_seed()))")
            result: list[list[Claim]] = []
            admitting = threading.Thread(
                target=lambda: result.append(store.admit("w", ["dated"], 1, 60_000)))
            admitting.start()
            wait_for(lambda: _waits_for_a_lock(keeper), 10, "the admit to wait")
            time.sleep(0.01)  # the wait has lasted: its start is in an earlier millisecond
            released = store.now_ms()
            locker.commit()
            admitting.join(30)
        [(claim,)] = result
        assert store._policy_bound == {}  # decided by the early exit
        job = store.get_job(claim.job.id)
        assert job.attempted_at_ms >= released
        assert job.lease_expires_at_ms >= released + 60_000
    finally:
        store.close()


def test_the_early_exit_completes_acked_rows_renewed_while_it_waited(pg_url: str) -> None:
    """The worker's lease keeper renews the jobs being acked while the ack's statement
    waits for the queue lock (another admit holds it): the statement's snapshot then
    shows versions older than the rows it locks. Every acked job must still complete
    (an UPDATE joined to the acks skipped one such row, silently: not applied, not
    reported lost, and the job ran again when its lease expired)."""
    store = open_store(pg_url, notify=False)
    try:
        _enqueue(store, 6, "renewed")
        held = store.admit("w", ["renewed"], 3)
        with psycopg.connect(pg_url) as locker, psycopg.connect(pg_url, autocommit=True) as keeper:
            locker.execute("SELECT pg_advisory_xact_lock("
                           "hashtextextended('renewed', headgate_queue_lock_seed()))")
            result: list[tuple[list[str], list[Claim]]] = []
            acking = threading.Thread(target=lambda: result.append(store.ack_and_admit(
                [AckRequest(c, "success", result=b"r") for c in held], "w", ["renewed"], 3)))
            acking.start()
            wait_for(lambda: _waits_for_a_lock(keeper), 10, "the ack to wait for the queue")
            store.renew(held, 60_000)  # commits while the ack waits
            locker.commit()
            acking.join(30)
        [(lost, claims)] = result
        assert lost == [] and len(claims) == 3 and store._policy_bound == {}
        for c in held:
            job = store.get_job(c.job.id)
            assert job.state is State.COMPLETED and job.lease_id is None, job
            assert store.get_result(c.job.id).bytes == b"r"
        assert store.counts("renewed")["completed"] == 3
        assert store.counts("renewed")["running"] == 3
    finally:
        store.close()


def _waits_for_a_lock(conn: psycopg.Connection) -> bool:
    return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                        "'Lock' AND datname = current_database()").fetchone()[0] > 0


def _ack_behind_an_admission(store: Any, pg_url: str,
                              ack: Callable[[Claim], object]) -> tuple[float, int]:
    """A job of the adaptive class `smtp` (10 an hour) acked by `ack` while another
    transaction, standing for an admission, holds the class row: it took 3 tokens and
    refilled the bucket at its own clock, read after the ack's (here: well after, so the
    order is certain). Returns the tokens before it and its refill instant."""
    store.upsert_rate_class("smtp", 10, 3_600_000, adaptive=Adaptive(1, 100, 0.5, 5))
    headgate.Client(store).enqueue_many(
        [Envelope(kind="k", payload=b"1", queue="aq", rate_class="smtp")])
    (claim,) = store.admit("w", ["aq"], 1)
    with psycopg.connect(pg_url) as admitting, \
            psycopg.connect(pg_url, autocommit=True) as keeper:
        (before,) = admitting.execute(
            "SELECT tokens FROM rate_classes WHERE name = 'smtp' FOR UPDATE").fetchone()
        refilled = store.now_ms() + 60_000
        admitting.execute("UPDATE rate_classes SET tokens = tokens - 3, "
                          "refilled_at_ms = %s WHERE name = 'smtp'", (refilled,))
        acking = threading.Thread(target=lambda: ack(claim))
        acking.start()
        wait_for(lambda: _waits_for_a_lock(keeper), 10, "the ack to wait for the row")
        admitting.commit()
        acking.join(30)
    return before, refilled


def _smtp_row(pg_url: str) -> tuple[int, float, int]:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT limit_per_window, tokens, refilled_at_ms "
                            "FROM rate_classes WHERE name = 'smtp'").fetchone()


def test_a_raise_settles_the_tokens_an_admission_left(pg_url: str) -> None:
    """An adaptive class's raise that waits for an admission holding the class row
    settles the tokens that admission left; it never writes back tokens read before it
    (which would hand the admission's tokens out a second time)."""
    store: Any = open_store(pg_url)
    try:
        before, refilled = _ack_behind_an_admission(
            store, pg_url, lambda claim: store.ack_many([AckRequest(claim, "success")]))
        limit, tokens, at = _smtp_row(pg_url)
        assert limit == 15  # raised by its step
        # An hour's window refills 10 tokens an hour: the three taken stay taken.
        assert tokens == pytest.approx(before - 3, abs=0.05)
        # The refill instant does not go back to the raise's clock (that would mint the
        # tokens of the time between the two a second time).
        assert at == refilled
    finally:
        store.close()


def test_a_cut_keeps_the_refill_instant_of_an_admission_it_waited_for(pg_url: str) -> None:
    store: Any = open_store(pg_url)
    try:
        _, refilled = _ack_behind_an_admission(
            store, pg_url, lambda claim: store.ack(claim, Outcome.THROTTLED))
        limit, _, at = _smtp_row(pg_url)
        assert (limit, at) == (5, refilled)
    finally:
        store.close()


def _two_classes(store: Any, first: str, second: str) -> tuple[str, str]:
    """Queue `qa` with a job of class `first` ahead of one of class `second`."""
    for name in ("a", "b"):
        store.upsert_rate_class(name, limit=1000, window_ms=1000, burst=1000)
    ahead = _enqueue(store, 1, "qa", rate_class=first, priority=5)[0]
    behind = _enqueue(store, 1, "qa", rate_class=second, priority=1)[0]
    return ahead, behind


def _lock_class(conn: psycopg.Connection, name: str) -> None:
    conn.execute("SELECT 1 FROM rate_classes WHERE name = %s FOR UPDATE", (name,))


def test_admission_waits_for_class_rows_in_name_order_only(pg_url: str) -> None:
    """A class row that sorts below one the turn already holds is taken only if free:
    held by another admission (which may be waiting for the row this turn holds), its
    jobs wait for the next turn instead, and no rate verdict is counted for them."""
    store: Any = open_store(pg_url, notify=False)
    try:
        ahead, behind = _two_classes(store, "b", "a")
        with psycopg.connect(pg_url) as other:
            _lock_class(other, "a")
            # Waiting for "a" while holding "b" could deadlock: without the order rule
            # this admit waits for the lock timeout and fails.
            assert [c.job.id for c in store.admit("w", ["qa"], 2)] == [ahead]
            other.commit()
        assert [c.job.id for c in store.admit("w", ["qa"], 2)] == [behind]
        rejections = [b.admission_rejections for b in store.history("qa", 0, 60_000)]
        assert all(r.rate_class == 0 for r in rejections), rejections
    finally:
        store.close()


def _store_checks_deadlocks_after(pg_url: str, timeout: str) -> None:
    """deadlock_timeout of the sessions opened on the test's database from now on."""
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} SET deadlock_timeout = {}").format(
            sql.Identifier(admin.info.dbname), sql.Literal(timeout)))


def _meets_an_admission(pg_url: str, call: Callable[[], Any], lower: str,
                        higher: str) -> Any:
    """`call()` while another transaction, taking class rows as admission does (name
    order), holds `lower` and, once the call waits for a lock, takes `higher` too. A
    call that holds `higher` while it waits for `lower` closes a cycle: `other` checks
    for one first (100 ms against the store's 10 s) and fails as its victim. Returns
    what the call returned."""
    _store_checks_deadlocks_after(pg_url, "10s")
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(call())
        except Exception as exc:  # noqa: BLE001 - reported below
            result.append(exc)

    with psycopg.connect(pg_url) as other, \
            psycopg.connect(pg_url, autocommit=True) as keeper:
        other.execute("SET deadlock_timeout = '100ms'")
        _lock_class(other, lower)
        thread = threading.Thread(target=run)
        thread.start()
        wait_for(lambda: _waits_for_a_lock(keeper), 10, "the call to wait for a class row")
        _lock_class(other, higher)  # DeadlockDetected if the call holds it
        other.commit()
        thread.join(30)
    [value] = result
    assert not isinstance(value, Exception), value
    return value


def test_a_throttled_ack_does_not_hold_its_class_while_admission_waits(pg_url: str) -> None:
    """A throttle cuts its class (row b) in the ack's transaction; the admission of the
    same turn then waits for class a. Taken in one transaction that is b before a, the
    reverse of every admission's order: the acks commit before the turn admits."""
    store: Any = open_store(pg_url, notify=False)
    try:
        for name in ("a", "b"):
            store.upsert_rate_class(name, limit=1000, window_ms=1000, burst=1000)
        _enqueue(store, 1, "qt", rate_class="b")
        (claim,) = store.admit("w", ["qt"], 1)
        (waiting,) = _enqueue(store, 1, "qa", rate_class="a")
        lost, claims = _meets_an_admission(pg_url, lambda: store.ack_and_admit(
            [AckRequest(claim, Outcome.THROTTLED.value)], "w", ["qa"], 1), "a", "b")
        assert lost == [] and [c.job.id for c in claims] == [waiting]
        assert store.get_job(claim.job.id).state is State.SCHEDULED
    finally:
        store.close()


def _draining_acks(store: Any, older: str, newer: str) -> list[AckRequest]:
    """Rate-limited acks with a delay (each drains its class) of a job of class `older`
    and a newer one of class `newer`, in id order."""
    for name in (older, newer):
        store.upsert_rate_class(name, limit=1000, window_ms=1000, burst=1000)
    _enqueue(store, 1, "qt", rate_class=older)
    _enqueue(store, 1, "qt", rate_class=newer)
    claims = sorted(store.admit("w", ["qt"], 2), key=lambda c: c.job.id)
    assert [c.job.rate_class for c in claims] == [older, newer]
    return [AckRequest(c, Outcome.RATE_LIMITED.value, delay_ms=500) for c in claims]


def test_an_ack_batch_locks_the_classes_it_writes_in_name_order(pg_url: str) -> None:
    """Two rate-limited acks with a delay drain their classes. Applied in id order, the
    job of class b (the older) would lock b, then wait for a while holding it."""
    store: Any = open_store(pg_url, notify=False)
    try:
        acks = _draining_acks(store, "b", "a")
        assert _meets_an_admission(pg_url, lambda: store.ack_many(acks), "a", "b") == []
        with psycopg.connect(pg_url) as conn:
            tokens = dict(conn.execute("SELECT name, tokens FROM rate_classes"))
        assert tokens["a"] < 0 and tokens["b"] < 0, tokens
    finally:
        store.close()


@pytest.fixture
def natural_order_url() -> Iterator[str]:
    """A database whose default collation is a language's (ICU "en": "a" before "B"),
    where ORDER BY a text column is not code point order."""
    admin = os.environ["HG_TEST_PG"]
    name = f"hg_icu_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0 LOCALE_PROVIDER icu "
                             "ICU_LOCALE 'en' LOCALE 'C.UTF-8'").format(sql.Identifier(name)))
    try:
        yield with_database(admin, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_class_rows_are_locked_by_code_point_whatever_the_collation(
        natural_order_url: str) -> None:
    """Admission takes class rows by code point ("B" before "a"); an ack batch sorted by
    the database's collation would take "a" first, then wait for "B" while holding it."""
    store: Any = open_store(natural_order_url, notify=False)
    try:
        acks = _draining_acks(store, "a", "B")
        assert _meets_an_admission(natural_order_url, lambda: store.ack_many(acks),
                                   "B", "a") == []
    finally:
        store.close()


def test_an_adaptive_raise_locks_its_classes_by_code_point(natural_order_url: str) -> None:
    """Plain successes of two adaptive classes: the raise after them takes "B" first."""
    store: Any = open_store(natural_order_url, notify=False)
    try:
        for name in ("a", "B"):
            store.upsert_rate_class(name, 10, 60_000, adaptive=Adaptive(1, 100, 0.5, 5))
        _enqueue(store, 1, "qt", rate_class="a")
        _enqueue(store, 1, "qt", rate_class="B")
        acks = [AckRequest(c, "success") for c in store.admit("w", ["qt"], 2)]
        assert _meets_an_admission(natural_order_url, lambda: store.ack_many(acks),
                                   "B", "a") == []
        assert _limit_of(natural_order_url, "a") == _limit_of(natural_order_url, "B") == 15
    finally:
        store.close()


def test_an_adaptive_raise_that_fails_leaves_the_committed_acks_acked(pg_url: str) -> None:
    """The raise runs after the plain successes committed; it cannot have the class row
    here (held past the statement timeout), and the ack still returns: the worker must
    not take acks that are in for failed."""
    store: Any = open_store(pg_url, notify=False, statement_timeout_ms=500)
    try:
        store.upsert_rate_class("up", 10, 60_000, adaptive=Adaptive(1, 100, 0.5, 5))
        _enqueue(store, 2, "qr", rate_class="up")
        first, second = store.admit("w", ["qr"], 2)
        with psycopg.connect(pg_url) as holder:
            _lock_class(holder, "up")
            assert store.ack_many([AckRequest(first, "success")]) == []
            lost, _ = store.ack_and_admit([AckRequest(second, "success")], "w", ["qr"], 1)
            assert lost == []
            holder.rollback()
        assert {store.get_job(c.job.id).state for c in (first, second)} == {State.COMPLETED}
        assert _limit_of(pg_url, "up") == 10  # neither raise happened
    finally:
        store.close()


def _limit_of(pg_url: str, name: str) -> int:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT limit_per_window FROM rate_classes WHERE name = %s",
                            (name,)).fetchone()[0]


def test_a_deadlocked_admission_runs_again(pg_url: str) -> None:
    """An admission PostgreSQL picks as a deadlock's victim (here against a transaction
    that takes the classes against the order admissions keep) runs again once the
    other has gone on: the worker gets its claims, not StoreUnavailable."""
    # Who is the victim is whose deadlock check finds the cycle first: the store's
    # sessions check 3 s into a wait, `other` only after a minute, so the admit is the
    # victim however late a loaded machine lets `other` start waiting.
    _store_checks_deadlocks_after(pg_url, "3s")
    store: Any = open_store(pg_url, notify=False)
    try:
        _two_classes(store, "a", "b")
        with psycopg.connect(pg_url) as other, \
                psycopg.connect(pg_url, autocommit=True) as keeper:
            other.execute("SET deadlock_timeout = '60s'")
            _lock_class(other, "b")
            result: list[Any] = []

            def admit() -> None:
                try:
                    result.append(store.admit("w", ["qa"], 2))
                except Exception as exc:  # noqa: BLE001 - reported below
                    result.append(exc)

            admitting = threading.Thread(target=admit)
            admitting.start()
            wait_for(lambda: _waits_for_a_lock(keeper), 10, "the admit to wait for b")
            _lock_class(other, "a")
            other.commit()
            admitting.join(30)
        [claims] = result
        assert not isinstance(claims, Exception), claims
        assert len(claims) == 2
    finally:
        store.close()


def test_combined_call_reports_every_kind_of_lost_lease(pg_url: str) -> None:
    store: Any = open_store(pg_url)
    try:
        _enqueue(store, 6, "lq")
        first = store.admit("w", ["lq"], 4)
        done, reclaimed, cancelled, current = first
        store.ack(done, headgate.Outcome.SUCCESS)  # acked already
        store.operator_cancel(cancelled.job.id)  # cancelled under the worker
        with psycopg.connect(pg_url) as conn:  # reclaimed and re-admitted elsewhere
            conn.execute("UPDATE jobs SET lease_id = 'other', fence = fence + 1 WHERE id = %s",
                         (reclaimed.job.id,))
        lost, claims = store.ack_and_admit(
            [AckRequest(c, "success", result=b"out") for c in first], "w", ["lq"], 2)
        assert lost == sorted([done.job.id, reclaimed.job.id, cancelled.job.id])
        assert len(claims) == 2 and {c.job.state for c in claims} == {State.RUNNING}
        assert store.get_job(cancelled.job.id).state is State.CANCELLED
        assert store.get_job(reclaimed.job.id).state is State.RUNNING
        assert store.get_job(reclaimed.job.id).lease_id == "other"
        assert store.get_result(reclaimed.job.id) is None
        job = store.get_job(current.job.id)
        assert job.state is State.COMPLETED and job.lease_id is None
        assert job.lease_expires_at_ms is None and job.errors == []
        assert job.finalized_at_ms is not None
        assert store.get_result(current.job.id).bytes == b"out"
        completed = sum(b.completed for b in store.history("lq", 0, 60_000))
        assert completed == 2  # the single ack and the one current success
        assert store.counts("lq")["completed"] == 2
        assert store.counts("lq")["running"] == 3
    finally:
        store.close()


def test_plain_success_effects_match_the_lifecycle(pg_url: str) -> None:
    store: Any = open_store(pg_url)
    try:
        _enqueue(store, 1, "kept", retention_ms=5_000)
        _enqueue(store, 1, "gone", retention_ms=0)
        (kept,) = store.admit("w", ["kept"], 1)
        (gone,) = store.admit("w", ["gone"], 1)
        lost = store.ack_many([
            AckRequest(kept, "success", result=b"r", result_schema_version=3),
            AckRequest(gone, "success"),
        ])
        assert lost == []
        job = store.get_job(kept.job.id)
        assert job.state is State.COMPLETED and job.attempt == 0 and job.fence == 1
        with psycopg.connect(pg_url) as conn:
            finalized, expires = conn.execute(
                "SELECT finalized_at_ms, expires_at_ms FROM jobs WHERE id = %s",
                (kept.job.id,)).fetchone()
        assert expires == finalized + 5_000
        result = store.get_result(kept.job.id)
        assert (result.bytes, result.schema_version) == (b"r", 3)
        assert store.get_job(gone.job.id) is None
        assert store.counts("gone").get("running", 0) == 0
        assert sum(b.completed for b in store.history("gone", 0, 60_000)) == 1
        # The same acks again: both lost, nothing written.
        assert store.ack_many([AckRequest(kept, "success"), AckRequest(gone, "success")]) \
            == sorted([kept.job.id, gone.job.id])
        assert sum(b.completed for b in store.history("kept", 0, 60_000)) == 1
    finally:
        store.close()


def test_a_batch_with_other_outcomes_goes_through_the_lifecycle(pg_url: str) -> None:
    store: Any = open_store(pg_url)
    try:
        _enqueue(store, 4, "mx")
        a, b, c = store.admit("w", ["mx"], 3)
        lost, claims = store.ack_and_admit([
            AckRequest(a, "success"),
            AckRequest(b, "retry", error="boom", delay_ms=60_000),
            AckRequest(c, "success", logs=("kept line",)),
            AckRequest(a, "success"),  # twice in one batch: the second is lost
        ], "w", ["mx"], 3)
        assert lost == [a.job.id]
        assert [cl.job.state for cl in claims] == [State.RUNNING]
        assert store.get_job(a.job.id).state is State.COMPLETED
        retried = store.get_job(b.job.id)
        assert retried.state is State.RETRYABLE and retried.errors[-1]["error"] == "boom"
        logged = store.get_job(c.job.id)
        assert logged.state is State.COMPLETED and logged.errors[-1]["logs"] == ["kept line"]
    finally:
        store.close()


def test_acks_find_their_rows_by_primary_key(pg_url: str) -> None:
    """An ack batch goes from the acks to their rows; a plan made while jobs was small
    read every running job for each batch (O(running jobs in the database) per ack
    call). The session's index counters show which indexes the acks read."""
    store = open_store(pg_url, notify=False, pool_max=1)

    try:
        _enqueue(store, 300, "pk")
        claims = store.admit("w", ["pk"], 300)
        assert len(claims) == 300
        before = jobs_index_reads(store)
        assert store.ack_many([AckRequest(c, "success") for c in claims]) == []
        read = jobs_index_reads_since(store, before)
    finally:
        store.close()
    assert read.pop("jobs_pkey") >= 300
    assert all(n == 0 for n in read.values()), {k: n for k, n in read.items() if n}


def _index_reads_of_drain_turns(store: Any, queue: str, turns: int) -> dict[str, int]:
    """Tuples read from each index of `jobs` by `turns` capacity-2 turns of a draining
    worker (ack both, claim two), after a first claim outside the count."""
    lost, claims = store.ack_and_admit([], "w", [queue], 2, lease_ms=60_000)
    before = jobs_index_reads(store)
    for _ in range(turns):
        lost, claims = store.ack_and_admit([AckRequest(c, "success") for c in claims],
                                           "w", [queue], 2, lease_ms=60_000)
        assert lost == [] and len(claims) == 2
    return jobs_index_reads_since(store, before)


def test_the_early_exit_claims_its_candidates_by_primary_key(pg_url: str) -> None:
    """The early exit's claim goes from its locked candidates to their rows by id; with a
    state test beside the id list, a generic plan made while jobs was small read every
    available job through jobs_available_age on each call (O(backlog) per turn)."""
    store = open_store(pg_url, notify=False, pool_max=1)
    try:
        _enqueue(store, 2_000, "bypk")
        read = _index_reads_of_drain_turns(store, "bypk", 20)
    finally:
        store.close()
    assert read["jobs_available_age"] == 0, read
    assert read["jobs_pkey"] >= 20 * 2, read


@pytest.mark.parametrize("policies", [False, True], ids=["early-exit", "policy-block"])
def test_candidate_scans_use_jobs_admit_before_jobs_is_analyzed(pg_url: str,
                                                                 policies: bool) -> None:
    """Until `jobs` is first analyzed, the planner takes its partial indexes (built on an
    empty table) to be empty; a generic plan made then scanned a partition's candidates
    through jobs_available_age, reading every available job of the queue and sorting,
    on every claim until autovacuum analyzed the table (migration 18)."""
    store = open_store(pg_url, notify=False, pool_max=1)
    try:
        with store.db.read() as conn:
            conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = off)")
        if policies:
            store.upsert_rate_class("ample", limit=10**6, window_ms=1_000, burst=10**6)
        client = headgate.Client(store)
        for start in range(0, 20_000, 1_000):  # tenants interleaved, as they arrive
            client.enqueue_many([
                Envelope(kind="k", payload=b"%d" % i, queue="fresh",
                         **({"partition_key": f"tenant-{i % 50:02d}", "rate_class": "ample"}
                            if policies else {}))
                for i in range(start, start + 1_000)])
        with store.db.read() as conn:
            (reltuples,) = conn.execute(
                "SELECT reltuples FROM pg_class WHERE relname = 'jobs'").fetchone()
        assert reltuples < 0  # never analyzed: the window this test is about
        read = _index_reads_of_drain_turns(store, "fresh", 20)
    finally:
        store.close()
    assert read["jobs_available_age"] == 0, read
    assert read["jobs_admit"] >= 20 * 2, read


def test_the_oldest_age_readers_still_walk_jobs_available_age(pg_url: str) -> None:
    """Migration 18's predicate admits only queries that test `enqueued_at_ms IS NOT
    NULL`: the quiet group's oldest job (a noisy partition's queue) must say so, or it
    sorts the queue's available jobs instead of reading the oldest few."""
    store = open_store(pg_url, notify=False, pool_max=1)
    try:
        client = headgate.Client(store)
        client.enqueue("k", b"calm", queue="q", partition_key="calm")
        for start in range(0, 20_000, 1_000):
            client.enqueue_many([Envelope(kind="k", payload=b"%d" % i, queue="q",
                                          partition_key="loud")
                                 for i in range(start, start + 1_000)])
        with store.db.read() as conn:
            conn.execute("ANALYZE jobs")
        before = jobs_index_reads(store)
        info = store.queue_extras()["q"]
        read = jobs_index_reads_since(store, before)
    finally:
        store.close()
    assert (info.noisy_partitions, info.quiet_exact) == (1, False)
    assert info.quiet_oldest_available_ms is not None
    # the scan's oldest QUIET_OLDEST_SCAN, through the index, not all 20,001
    assert 0 < read["jobs_available_age"] <= 2_100, read


def test_an_admit_locks_only_the_candidates_it_wants_on_a_first_read(pg_url: str) -> None:
    """Every candidate read is locked FOR UPDATE (a WAL record each): a first read of a
    partition takes what the admit wants, the extra room to skip comes only after a
    policy turned candidates away. Locked rows keep the locker's xid in xmax."""
    store = open_store(pg_url, notify=False)
    try:
        _enqueue(store, 20, "few")
        _enqueue(store, 20, "classed", rate_class="ample")
        store.upsert_rate_class("ample", limit=1000, window_ms=10**15, burst=1000)
        assert len(store.admit("w", ["few"], 2)) == 2  # the early exit
        assert len(store.admit("w", ["classed"], 2)) == 2  # the policy block
        with psycopg.connect(pg_url) as conn:
            locked = dict(conn.execute(
                "SELECT queue, count(*) FROM jobs WHERE state = 'available'"
                " AND xmax::text <> '0' GROUP BY queue").fetchall())
        assert locked == {}
    finally:
        store.close()
