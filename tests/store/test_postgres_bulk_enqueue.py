"""PostgreSQL's batch enqueue by COPY (headgate/adapters/postgres/bulk.py): a batch the
function would only insert goes by COPY and ends exactly as the function leaves one —
every column, the counters, the arrivals, the admission order, the wake-up; a batch the
function must decide (an existing id, a quarantined fingerprint, an enqueue limit, a
queue without a row, the same id twice) is rolled back and decided by the function."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from support import pg_available

from headgate import (
    Backpressure,
    Client,
    Envelope,
    IdConflict,
    InvalidInput,
    Quarantined,
    Store,
)
from headgate.adapters.postgres import bulk
from headgate.adapters.postgres.notify import CHANNEL

pytestmark = pytest.mark.skipif(not pg_available(), reason="HG_TEST_PG not set")

COLUMNS = ("kind, schema_version, payload, fingerprint, priority, partition_key, rate_class, "
           "weight, state, CASE WHEN scheduled_at_ms = enqueued_at_ms THEN 0 "
           "ELSE scheduled_at_ms END, max_attempts, retention_ms, tags, sticky_worker, "
           "headers, periodic_schedule_id, periodic_tick_ms, was_pending, attempt, errors")


@pytest.fixture
def store(pg_store: Store) -> Store:
    return pg_store  # this module's tests are PostgreSQL's alone


@pytest.fixture
def copied(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each batch the store tried to COPY was inserted that way."""
    seen: list[bool] = []
    real = bulk.copy_batch

    def watched(*args: object) -> object:
        result = real(*args)  # type: ignore[arg-type]
        seen.append(result is not None)
        return result

    monkeypatch.setattr(bulk, "copy_batch", watched)
    return seen


def batch(queue: str, n: int = 60, tag: str = "") -> list[Envelope]:
    return [Envelope(kind=f"k{i % 3}", payload=b"%s%d" % (tag.encode(), i), queue=queue,
                     priority=(i * 7) % 5 - 2, partition_key=("", "t1", "t2")[i % 3],
                     weight=1 + i % 2, max_attempts=1 + i % 4,
                     retention_ms=None if i % 2 else 5_000 + i,
                     tags=["b", "a"] if i % 5 == 0 else [],
                     headers={"z": str(i), "a": "x"} if i % 4 == 0 else {},
                     sticky_worker="s" if i % 6 == 0 else "",
                     scheduled_at_ms=2**41 + i if i % 7 == 0 else 0,
                     pending=i % 11 == 0,
                     periodic_schedule_id="sched" if i % 13 == 0 else "",
                     periodic_tick_ms=1_000 + i if i % 13 == 0 else 0)
            for i in range(n)]


def rows(pg_url: str, queue: str) -> list[tuple]:
    with psycopg.connect(pg_url) as conn:
        return conn.execute(f"SELECT {COLUMNS} FROM jobs WHERE queue = %s ORDER BY rowid",
                            (queue,)).fetchall()


def counters(pg_url: str, queue: str) -> tuple[list[tuple], list[tuple], int]:
    with psycopg.connect(pg_url) as conn:
        counts = conn.execute("SELECT state, n FROM queue_counts WHERE queue = %s AND n <> 0 "
                              "ORDER BY 1", (queue,)).fetchall()
        recount = conn.execute("SELECT state, count(*) FROM jobs WHERE queue = %s "
                               "GROUP BY 1 ORDER BY 1", (queue,)).fetchall()
        assert counts == recount
        parts = conn.execute("SELECT partition_key, waiting FROM partitions WHERE queue = %s "
                             "AND waiting <> 0 ORDER BY 1", (queue,)).fetchall()
        assert parts == conn.execute(
            "SELECT partition_key, count(*) FROM jobs WHERE queue = %s AND state = "
            "'available' GROUP BY 1 ORDER BY 1", (queue,)).fetchall()
        (arrived,) = conn.execute("SELECT coalesce(sum(arrived), 0) FROM queue_history "
                                  "WHERE queue = %s", (queue,)).fetchone()  # type: ignore[misc]
    return counts, parts, int(arrived)


def test_a_plain_batch_goes_by_copy_and_ends_as_the_function_leaves_it(
        pg_url: str, store: Store, copied: list[bool]) -> None:
    client = Client(store)
    for queue in ("by-copy", "by-function"):
        client.enqueue("k0", b"first", queue=queue)  # both queues get their row
    client.enqueue_many(batch("by-copy"))
    assert copied == [True]
    with psycopg.connect(pg_url, autocommit=True) as conn:  # what the function alone does
        conn.execute("UPDATE queues SET max_unfinished_jobs = 1000000 "
                     "WHERE name = 'by-function'")
    client.enqueue_many(batch("by-function"))
    assert copied == [True, False]

    assert rows(pg_url, "by-copy") == rows(pg_url, "by-function")
    assert counters(pg_url, "by-copy") == counters(pg_url, "by-function")
    assert counters(pg_url, "by-copy")[2] == 61
    order = {q: [c.job.payload for c in store.admit("w", [q], 100)]
             for q in ("by-copy", "by-function")}
    assert order["by-copy"] == order["by-function"] and len(order["by-copy"]) > 30


def test_a_batch_the_function_must_decide_is_rolled_back_and_decided_by_it(
        pg_url: str, store: Store, copied: list[bool],
        quarantine: Callable[[Store, str, bytes], str]) -> None:
    client = Client(store)
    first = client.enqueue("k", b"a", id="job-a", queue="q")
    ids = client.enqueue_many([Envelope(kind="k", payload=b"new", queue="q"),
                               Envelope(kind="k", payload=b"a", id="job-a", queue="q")])
    assert ids[1] == first and copied == [False]  # a replay, found by the COPY's key
    with pytest.raises(IdConflict):
        client.enqueue_many([Envelope(kind="k", payload=b"n", queue="q"),
                             Envelope(kind="k", payload=b"other", id="job-a", queue="q")])
    with pytest.raises(InvalidInput, match="same id twice"):
        client.enqueue_many([Envelope(kind="k", payload=b"x", id="twice", queue="q"),
                             Envelope(kind="k", payload=b"x", id="twice", queue="q")])
    quarantine(store, "poison", b"pill")
    with pytest.raises(Quarantined):
        client.enqueue_many([Envelope(kind="k", payload=b"fine", queue="q"),
                             Envelope(kind="poison", payload=b"pill", queue="q")])
    store.set_enqueue_limit("q", 3)
    with pytest.raises(Backpressure):
        client.enqueue_many([Envelope(kind="k", payload=b"%d" % i, queue="q")
                             for i in range(2)])
    assert copied == [False] * 5
    assert store.counts("q")["available"] == 2
    assert counters(pg_url, "q")[2] == 2
    client.enqueue_many([Envelope(kind="k", payload=b"%d" % i, queue="new-q")
                         for i in range(2)])  # no queue row yet: the function makes it
    assert copied == [False] * 6 and store.counts("new-q")["available"] == 2


def test_a_copied_batch_wakes_listeners_with_its_queues(pg_url: str, store: Store,
                                                        copied: list[bool]) -> None:
    client = Client(store)
    for queue in ("b-queue", "a-queue"):
        client.enqueue("k", b"first", queue=queue)
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        client.enqueue_many([Envelope(kind="k", payload=b"%d" % i,
                                      queue=("b-queue", "a-queue")[i % 2]) for i in range(4)])
        note = next(listener.notifies(timeout=10, stop_after=1))
    assert copied == [True]
    assert note.payload == f"{store.origin}|a-queue\x1fb-queue"  # type: ignore[attr-defined]
