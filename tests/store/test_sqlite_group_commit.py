"""SQLite's group commit (headgate/adapters/sqlite/combining.py): threads that queue
for the writer while another holds it run their actions in one transaction, each in its
own savepoint. The writer is held by a transaction of another thread, so the queue
forms for certain, not by timing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import headgate
from headgate.adapters.sqlite.combining import WriteCombiner
from headgate.adapters.sqlite.store import SqliteStore
from headgate.core import Envelope


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = headgate.open_store(f"sqlite:///{tmp_path / 'g.db'}")
    assert isinstance(s, SqliteStore)
    with s.db.write() as (conn, _):
        conn.execute("CREATE TABLE marks (who TEXT PRIMARY KEY)")
    try:
        yield s
    finally:
        s.close()


@contextmanager
def writer_held(store: SqliteStore) -> Iterator[threading.Event]:
    """Another thread's write transaction, open until the yielded event is set."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.db.write():
            holding.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    assert holding.wait(10)
    try:
        yield release
    finally:
        release.set()
        t.join(10)


def queued(combiner: WriteCombiner, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(combiner._waiting) < n:
        assert time.monotonic() < deadline, "the threads never queued"
        time.sleep(0.005)


def run_threads(calls: list[Callable[[], Any]]) -> list[Any]:
    """Each call on its own thread: what it returned or raised."""
    out: list[Any] = [None] * len(calls)

    def one(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_writers_that_queued_share_one_transaction(store: SqliteStore) -> None:
    combiner = store.combiner

    def mark(who: str) -> Callable[[], tuple[int, int]]:
        def action(conn: Any, now: int) -> tuple[int, int]:
            conn.execute("INSERT INTO marks (who) VALUES (?)", (who,))
            seen = conn.execute("SELECT count(*) FROM marks").fetchone()[0]
            return threading.get_ident(), seen
        return lambda: combiner.run(action)

    results: list[Any] = []
    with writer_held(store) as release:
        runner = threading.Thread(
            target=lambda: results.extend(run_threads([mark(f"w{i}") for i in range(6)])))
        runner.start()
        queued(combiner, 6)
        release.set()
        runner.join(30)
    assert all(isinstance(r, tuple) for r in results), results
    # One thread ran every action, each seeing the ones before it uncommitted: one
    # transaction; and all six committed.
    assert len({thread for thread, _ in results}) == 1
    assert sorted(seen for _, seen in results) == [1, 2, 3, 4, 5, 6]
    with store.db.read() as conn:
        assert conn.execute("SELECT count(*) FROM marks").fetchone()[0] == 6


def test_an_action_that_raises_undoes_only_its_own_writes(store: SqliteStore) -> None:
    combiner = store.combiner

    def action(who: str, fail: bool) -> Callable[[], str]:
        def write(conn: Any, now: int) -> str:
            conn.execute("INSERT INTO marks (who) VALUES (?)", (who,))
            if fail:
                raise ValueError(f"{who} refused")
            return who
        return lambda: combiner.run(write)

    results: list[Any] = []
    with writer_held(store) as release:
        runner = threading.Thread(target=lambda: results.extend(run_threads(
            [action("a", False), action("b", True), action("c", False)])))
        runner.start()
        queued(combiner, 3)
        release.set()
        runner.join(30)
    assert results[0] == "a" and results[2] == "c"
    assert isinstance(results[1], ValueError) and str(results[1]) == "b refused"
    with store.db.read() as conn:
        rows = conn.execute("SELECT who FROM marks ORDER BY who").fetchall()
    assert [r[0] for r in rows] == ["a", "c"]


def test_keyed_enqueues_queued_together_keep_their_keys_apart(store: SqliteStore) -> None:
    answer = (201, {"Content-Type": "application/json"}, b'{"ok": true}')

    def keyed(scope: str, payload: bytes) -> Callable[[], Any]:
        env = Envelope(kind="k", payload=payload, queue="q").validated()
        return lambda: store.enqueue_keyed(scope, "hash-" + scope, env, answer)

    calls = [keyed(f"idem:{i}", b"%d" % i) for i in range(5)] + [keyed("idem:0", b"0")]
    results: list[Any] = []
    with writer_held(store) as release:
        runner = threading.Thread(target=lambda: results.extend(run_threads(calls)))
        runner.start()
        queued(store.combiner, len(calls))
        release.set()
        runner.join(30)
    assert not any(isinstance(r, Exception) for r in results), results
    fresh = [r for r in results if r.record is None]
    replayed = [r for r in results if r.record is not None]
    # The key used twice: one of its requests enqueued, the other replays its answer.
    assert len(fresh) == 5 and len({r.ids[0] for r in fresh}) == 5
    assert len(replayed) == 1 and replayed[0].record.status == 201
    assert store.counts()["available"] == 5


def test_jobs_enqueued_meanwhile_share_one_commit(store: SqliteStore) -> None:
    """A producer's threads (Client.enqueue) that queued for the writer commit together,
    and a refused one (its queue full) takes only its own job back."""
    store.set_enqueue_limit("full", 1)
    commits: list[int] = []
    counted = store.db.checkpointer.committed

    def committed(changes: int) -> None:  # every commit's count of changed rows
        commits.append(changes)
        counted(changes)

    store.db.checkpointer.committed = committed  # type: ignore[method-assign]
    envs = [Envelope(kind="k", payload=b"%d" % i, queue="q") for i in range(4)] + [
        Envelope(kind="k", payload=b"f%d" % i, queue="full") for i in range(2)]
    results: list[Any] = []
    with writer_held(store) as release:
        runner = threading.Thread(target=lambda: results.extend(
            run_threads([lambda e=e: store.enqueue_many([e]) for e in envs])))
        runner.start()
        queued(store.combiner, len(envs))
        release.set()
        runner.join(30)
    assert len([n for n in commits if n]) == 1, commits  # the holder's wrote nothing
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(refused) == 1 and isinstance(refused[0], headgate.Backpressure)
    ids = [r[0] for r in results if isinstance(r, list)]
    assert len(set(ids)) == 5
    assert store.counts()["available"] == 5
