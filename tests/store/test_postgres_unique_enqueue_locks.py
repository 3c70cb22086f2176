"""PostgreSQL: an enqueue with a unique key (headgate_enqueue_v3) takes its key's lock,
then its queue's, before it reads anything. What that order must get right: the key is
held before the queue is waited for, and an id another producer inserts while this one
waits is read after the wait, so it is a replay or a conflict, never a driver error."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from support import pg_available

from headgate import Envelope, IdConflict, Store, open_store

pytestmark = pytest.mark.skipif(not pg_available(), reason="HG_TEST_PG not set")

QUEUE_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))"


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    store = open_store(pg_url)
    store.enqueue_many([Envelope(kind="k", payload=b"warm", queue="q")])  # the queue row
    yield store
    store.close()


def _waiting_for_advisory(conn: psycopg.Connection, pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return row is not None and row[0] == "advisory"


def _enqueue_behind_the_queue_lock(store: Store, pg_url: str, env: Envelope,
                                   before_release) -> dict:
    """Hold queue q's lock in another transaction, start `env`'s enqueue, wait until it
    blocks on that lock, run `before_release(holder)`, then commit the holder."""
    holder = psycopg.connect(pg_url)
    watcher = psycopg.connect(pg_url, autocommit=True)
    out: dict = {}
    try:
        holder.execute(QUEUE_LOCK, ("q",))
        ours = {holder.info.backend_pid, watcher.info.backend_pid}

        def run() -> None:
            try:
                out["ids"] = store.enqueue_many([env])
            except Exception as exc:  # the test inspects what was raised
                out["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 10
        blocked = None
        while blocked is None and time.monotonic() < deadline:
            for (pid,) in watcher.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"):
                if pid not in ours and _waiting_for_advisory(watcher, pid):
                    blocked = pid
            time.sleep(0.01)
        assert blocked is not None, "the enqueue never waited for the queue lock"
        # Keys before queues: the waiting enqueue already holds its key's lock.
        out["key_locks_held"] = watcher.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory' "
            "AND granted", (blocked,)).fetchone()[0]
        before_release(holder)
        holder.commit()
        thread.join(10)
        assert not thread.is_alive()
    finally:
        holder.close()
        watcher.close()
    return out


def _insert_plain(holder: psycopg.Connection, store: Store, env: Envelope) -> None:
    store.enqueue_many_in(holder, [env])  # type: ignore[attr-defined]


def test_the_key_is_held_before_the_queue_lock_is_waited_for(store: Store,
                                                             pg_url: str) -> None:
    env = Envelope(id="keyed", kind="k", payload=b"p", queue="q", unique_key=b"K")
    out = _enqueue_behind_the_queue_lock(store, pg_url, env, lambda holder: None)
    assert out["key_locks_held"] >= 1
    assert out["ids"] == ["keyed"]
    assert store.get_job("keyed") is not None


def test_an_identical_job_inserted_meanwhile_is_a_replay(store: Store, pg_url: str) -> None:
    env = Envelope(id="same", kind="k", payload=b"p", queue="q", unique_key=b"K1")
    twin = Envelope(id="same", kind="k", payload=b"p", queue="q")
    out = _enqueue_behind_the_queue_lock(
        store, pg_url, env, lambda holder: _insert_plain(holder, store, twin))
    assert "error" not in out, out.get("error")
    assert out["ids"] == ["same"]
    assert store.counts("q")["available"] == 2  # the warm-up job and "same", once


def test_a_different_job_inserted_meanwhile_is_a_conflict(store: Store, pg_url: str) -> None:
    env = Envelope(id="same", kind="k", payload=b"mine", queue="q", unique_key=b"K2")
    other = Envelope(id="same", kind="k", payload=b"theirs", queue="q")
    out = _enqueue_behind_the_queue_lock(
        store, pg_url, env, lambda holder: _insert_plain(holder, store, other))
    assert isinstance(out.get("error"), IdConflict), out
    job = store.get_job("same", include_payload=True)
    assert job is not None and job.payload == b"theirs"
    # The refused enqueue's key claim was rolled back with it: the key is free.
    again = Envelope(id="later", kind="k", payload=b"later", queue="q", unique_key=b"K2")
    assert store.enqueue_many([again]) == ["later"]
    assert store.counts("q")["available"] == 3
