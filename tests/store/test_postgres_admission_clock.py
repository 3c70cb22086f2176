"""PostgreSQL's admission reads the store's clock after it holds the queues' locks, so
admissions' times follow the order the locks serialize them in. Read before a wait for
the lock, an admission's time could precede that of the admission that held the lock:
a rate bucket then loaded at the earlier time mints nothing, writes that time back as its
refill instant, and later refills the same interval a second time (more admitted than
the class allows); and a job's `attempted_at_ms` would precede its claim."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from support import pg_available

from headgate import Client, Envelope, Store
from headgate.core import Claim, Outcome
from headgate.core.job import AckRequest

pytestmark = pytest.mark.skipif(not pg_available(), reason="needs HG_TEST_PG")

Q = "clocked"
HELD_S = 0.4


def admitted_after_the_lock(url: str, admit: Callable[[], list[Claim]]) -> tuple[int, Claim]:
    """`admit()` in a thread while another transaction holds Q's admission lock for
    HELD_S; the store time when that transaction let go, and the one claim made."""
    result: list[list[Claim]] = []
    with psycopg.connect(url) as holder:
        holder.execute("SELECT headgate_lock_queue_v1(%s)", (Q,))
        thread = threading.Thread(target=lambda: result.append(admit()))
        thread.start()
        time.sleep(HELD_S)
        assert thread.is_alive(), "the admission did not wait for the queue's lock"
        released = holder.execute("SELECT headgate_now_ms()").fetchone()[0]
        holder.commit()
    thread.join(30)
    assert len(result) == 1 and len(result[0]) == 1, result
    return released, result[0][0]


def test_the_policy_blocks_time_is_read_after_the_queue_lock(pg_url: str,
                                                            pg_store: Store) -> None:
    pg_store.upsert_rate_class("clocked", limit=100, window_ms=1_000, burst=100)
    Client(pg_store).enqueue_many([Envelope(kind="k", payload=b"{}", queue=Q,
                                            rate_class="clocked") for _ in range(2)])
    # The first admit tries the early exit, whose statement takes the lock, and finds a
    # policy has a say; the next ones go straight to the policy block.
    assert len(pg_store.admit("w", [Q], capacity=1)) == 1
    released, claim = admitted_after_the_lock(
        pg_url, lambda: pg_store.admit("w", [Q], capacity=1))
    assert claim.job.attempted_at_ms is not None
    assert claim.job.attempted_at_ms >= released


def test_an_admit_with_acks_that_are_not_plain_reads_its_time_after_the_locks(
        pg_url: str, pg_store: Store) -> None:
    client = Client(pg_store)
    client.enqueue_many([Envelope(kind="k", payload=b"{}", queue=Q, max_attempts=1)
                         for _ in range(2)])
    first = pg_store.admit("w", [Q], capacity=1)
    assert len(first) == 1
    # A retry is not a plain success: this admit goes by the shared lifecycle.
    acks = [AckRequest(first[0], Outcome.RETRY.value, error="no")]
    released, claim = admitted_after_the_lock(
        pg_url, lambda: pg_store.ack_and_admit(acks, "w", [Q], 1)[1])  # type: ignore[attr-defined]
    assert claim.job.attempted_at_ms is not None
    assert claim.job.attempted_at_ms >= released


def test_the_store_clock_truncates_to_the_millisecond_as_sqlite_does(
        pg_url: str, pg_store: Store) -> None:
    """Between two exact readings taken around it in one statement, every time: a clock
    that rounded would be ahead of the later reading about half the time."""
    exact = "extract(epoch FROM clock_timestamp()) * 1000"
    with psycopg.connect(pg_url) as conn:
        for _ in range(40):
            before, now, after = conn.execute(
                f"SELECT {exact}, headgate_now_ms(), {exact}").fetchone()
            assert int(before) <= now <= int(after), (before, now, after)
    assert pg_store.now_ms() <= int(time.time() * 1000)


def test_the_store_clock_costs_what_its_expression_did(pg_url: str,
                                                       pg_store: Store) -> None:
    """The planner inlines headgate_now_ms(): the plan calls clock_timestamp() itself."""
    with psycopg.connect(pg_url) as conn:
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN (VERBOSE, COSTS OFF) SELECT headgate_now_ms()"))
    assert "clock_timestamp()" in plan and "headgate_now_ms" not in plan, plan
