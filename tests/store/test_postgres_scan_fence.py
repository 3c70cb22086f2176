"""PostgreSQL's partition scan fence (db/postgres/0025_partition_scan_fence.sql): the
candidate scan starts where no available job precedes it, so the index entries of jobs
claimed earlier, which vacuum cannot remove while a snapshot is held, are not walked;
and the fence never hides a job (it moves back for any job that becomes available
before it: a retry, a higher priority, a priority change)."""

from __future__ import annotations

import psycopg
import pytest
from support import hold_snapshot, pg_available

from headgate import Client, Envelope, Store
from headgate.core import Outcome
from headgate.core.job import AckRequest
from headgate.core.schema_constants import SCAN_FENCE_SLACK

pytestmark = pytest.mark.skipif(not pg_available(), reason="needs HG_TEST_PG")

Q = "default"


@pytest.fixture
def store(pg_store: Store) -> Store:
    return pg_store  # this module's tests are PostgreSQL's alone


def fence(url: str, partition: str = "") -> tuple[int | None, int | None]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT scan_priority, scan_rowid FROM partitions "
                           "WHERE queue = %s AND partition_key = %s", (Q, partition)).fetchone()
    assert row is not None
    return row[0], row[1]


def drain(store: Store, jobs: int, batch: int = 50) -> list[str]:
    """Claim and complete `jobs` jobs the way a busy worker does."""
    done: list[str] = []
    _, claims = store.ack_and_admit([], "w", [Q], batch)
    while claims and len(done) < jobs:
        done += [c.job.id for c in claims]
        want = min(batch, jobs - len(done))
        _, claims = store.ack_and_admit([AckRequest(c, Outcome.SUCCESS) for c in claims],
                                        "w", [Q], want)
    if claims:
        store.ack_many([AckRequest(c, Outcome.SUCCESS) for c in claims])
    return done


def rowid_of(url: str, job_id: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT rowid FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return int(row[0])


def test_the_fence_follows_the_claims(store: Store, pg_url: str) -> None:
    client = Client(store)
    ids = client.enqueue_many([Envelope(kind="work", payload=b"x")
                               for _ in range(3 * SCAN_FENCE_SLACK)])
    drain(store, 2 * SCAN_FENCE_SLACK)
    priority, rowid = fence(pg_url)
    assert priority == 0 and rowid is not None
    # Behind the first waiting job by at most the slack, and never past it.
    first_waiting = rowid_of(pg_url, ids[2 * SCAN_FENCE_SLACK])
    assert first_waiting - SCAN_FENCE_SLACK <= rowid <= first_waiting


def test_a_retried_job_before_the_fence_is_admitted_first(store: Store, pg_url: str) -> None:
    client = Client(store)
    client.enqueue_many([Envelope(kind="work", payload=b"x")
                         for _ in range(3 * SCAN_FENCE_SLACK)])
    (early,) = store.admit("w", [Q], capacity=1)
    drain(store, 2 * SCAN_FENCE_SLACK)
    assert fence(pg_url)[1] > rowid_of(pg_url, early.job.id)  # type: ignore[operator]
    store.ack(early, Outcome.RETRY, error="flaky", delay_ms=0)
    (again,) = store.admit("w", [Q], capacity=1)
    assert again.job.id == early.job.id and again.job.attempt == 1
    assert fence(pg_url) == (0, rowid_of(pg_url, early.job.id))


def test_a_higher_priority_job_moves_the_fence_back(store: Store, pg_url: str) -> None:
    client = Client(store)
    client.enqueue_many([Envelope(kind="work", payload=b"x")
                         for _ in range(2 * SCAN_FENCE_SLACK)])
    drain(store, SCAN_FENCE_SLACK + 10)
    assert fence(pg_url)[0] == 0
    urgent = client.enqueue("work", b"now", priority=5)
    assert fence(pg_url) == (5, rowid_of(pg_url, urgent))
    (claim,) = store.admit("w", [Q], capacity=1)
    assert claim.job.id == urgent
    # Then the lower priority's waiting jobs, from the first one on.
    left = 2 * SCAN_FENCE_SLACK - (SCAN_FENCE_SLACK + 10)
    assert len(drain(store, 10 * SCAN_FENCE_SLACK)) == left


def test_every_job_runs_once_through_fences_retries_and_priorities(
    store: Store, pg_url: str
) -> None:
    """A mixed run, through the policy path too (a rate class, two partitions): nothing
    is hidden behind a fence, nothing claimed twice."""
    client = Client(store)
    store.upsert_rate_class("r", limit=100_000, window_ms=1_000, burst=100_000)
    wanted: set[str] = set()
    for round_ in range(6):
        wanted |= set(client.enqueue_many(
            [Envelope(kind="work", payload=b"x", priority=(i % 3) - round_ % 2,
                      partition_key=("a", "b")[i % 2], rate_class="r" if i % 5 == 0 else "")
             for i in range(SCAN_FENCE_SLACK)]))
        _, claims = store.ack_and_admit([], "w", [Q], 97)
        acks = [AckRequest(c, Outcome.RETRY if i % 7 == 0 and c.job.attempt == 0
                           else Outcome.SUCCESS, error="again", delay_ms=0)
                for i, c in enumerate(claims)]
        store.ack_many(acks)
    finished: set[str] = set()
    for _ in range(200):
        claims = store.admit("w", [Q], capacity=64)
        if not claims:
            break
        assert not {c.job.id for c in claims} & finished
        store.ack_many([AckRequest(c, Outcome.SUCCESS) for c in claims])
        finished |= {c.job.id for c in claims}
    counts = store.counts(Q)
    assert counts.get("available", 0) == 0 and counts.get("running", 0) == 0
    assert counts.get("completed", 0) == len(wanted)


def test_under_a_held_snapshot_the_scan_skips_what_was_claimed(
    store: Store, pg_url: str
) -> None:
    """The buffers one candidate scan reads, from the fence and from the start, after
    3,000 and after 6,000 claims that vacuum could not clean up: from the fence it stays
    the same, from the start it grows with every claimed job."""
    client = Client(store)
    client.enqueue_many([Envelope(kind="work", payload=b"x") for _ in range(200)])

    def measure(conn: psycopg.Connection) -> tuple[int, int]:
        priority, rowid = fence(pg_url)
        assert rowid is not None

        def buffers(p: int | None, r: int | None) -> int:
            sql = "SELECT headgate_candidates_v1(%s, '', %s, %s, true, 50)"
            conn.execute(sql, (Q, p, r))  # plans made and cached: not counted below
            conn.rollback()
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql,
                                (Q, p, r)).fetchone()[0]  # type: ignore[index]
            conn.rollback()
            top = plan[0]["Plan"]
            return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])

        return buffers(priority, rowid), buffers(None, None)

    with psycopg.connect(pg_url) as holder, psycopg.connect(pg_url) as conn:
        hold_snapshot(holder)
        seen = []
        for _ in range(2):
            for _ in range(6):
                client.enqueue_many([Envelope(kind="work", payload=b"x") for _ in range(500)])
                drain(store, 500)
            client.enqueue_many([Envelope(kind="work", payload=b"x") for _ in range(100)])
            seen.append(measure(conn))
            drain(store, 100)
        holder.rollback()
    (fenced_1, start_1), (fenced_2, start_2) = seen
    assert fenced_2 <= fenced_1 + 10, seen
    assert start_2 >= start_1 + 50 and start_2 >= 2 * fenced_2, seen
