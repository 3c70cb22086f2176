"""PostgreSQL: `POST /api/v1/jobs`'s store call (`enqueue_keyed`) is one statement,
`headgate_enqueue_keyed_v1`, and its record read comes after the key's lock.

The statement count is read off libpq's own trace of the store's one pooled connection
(support.pg_statements_sent)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from support import pg_available, pg_statements_sent

from headgate import Backpressure, Envelope, Store, open_store
from headgate.adapters.postgres.connection import translate
from headgate.adapters.shared import idempotency

pytestmark = pytest.mark.skipif(not pg_available(), reason="HG_TEST_PG not set")

ANSWER = (201, {"Content-Type": "application/json"}, b'{"id": "x"}')
KEY_LOCK = translate(idempotency.KEY_LOCK)
RECORD = ("INSERT INTO api_idempotency (scope_key, request_hash, state, status, headers, "
          "body, created_at_ms, expires_at_ms) VALUES (%s, %s, %s, 200, '{}', %s, %s, %s)")


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    store = open_store(pg_url, pool_max=1)
    store.enqueue_many([Envelope(kind="k", payload=b"warm", queue="q")])  # the queue row
    yield store
    store.close()


def _env(key: str) -> Envelope:
    return Envelope(kind="k", payload=b"p", queue="q", unique_key=key.encode())


def test_a_new_key_and_its_replay_are_one_statement_each(store: Store) -> None:
    store.enqueue_keyed("warm:key", "h", _env("warm:key"), ANSWER)  # prepares the call
    out: dict = {}

    def first() -> None:
        out["first"] = store.enqueue_keyed("t:key", "h", _env("t:key"), ANSWER)

    def replay() -> None:
        out["replay"] = store.enqueue_keyed("t:key", "h", _env("t:key"), ANSWER)

    assert pg_statements_sent(store, first) == 1
    assert pg_statements_sent(store, replay) == 1
    assert out["first"].record is None and len(out["first"].ids) == 1
    record = out["replay"].record
    assert record is not None
    assert (record.state, record.status, record.body) == ("done", 201, ANSWER[2])
    assert record.headers == ANSWER[1]
    assert store.get_job(out["first"].ids[0]) is not None


def test_the_record_is_read_after_the_keys_lock(store: Store, pg_url: str) -> None:
    """A request that waited for the key's lock answers from what the holder committed
    meanwhile, instead of enqueueing a second job."""
    holder = psycopg.connect(pg_url)
    watcher = psycopg.connect(pg_url, autocommit=True)
    out: dict = {}
    try:
        holder.execute(KEY_LOCK, (b"w:key",))
        thread = threading.Thread(target=lambda: out.update(
            done=store.enqueue_keyed("w:key", "h", _env("w:key"), ANSWER)))
        thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not watcher.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event = 'advisory' AND pid <> %s "
                "AND datname = current_database()",
                (holder.info.backend_pid,)).fetchone():
            time.sleep(0.01)
        now = int(time.time() * 1000)
        holder.execute(RECORD, ("w:key", "h", "done", b"held", now, now + 60_000))
        holder.commit()
        thread.join(timeout=10)
    finally:
        holder.close()
        watcher.close()
    record = out["done"].record
    assert record is not None and record.status == 200 and record.body == b"held"
    assert store.counts()["available"] == 1  # only the warm-up job


def test_an_expired_or_abandoned_record_does_not_answer(store: Store, pg_url: str) -> None:
    now = int(time.time() * 1000)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for key, state, created, expires in (
                ("x:expired", "done", now - 10_000, now - 1),
                ("x:abandoned", "in_progress", now - idempotency.STALE_MS - 1, now + 60_000)):
            conn.execute(RECORD, (key, "old", state, b"old", created, expires))
    for key in ("x:expired", "x:abandoned"):
        done = store.enqueue_keyed(key, "new", _env(key), ANSWER)
        assert done.record is None and len(done.ids) == 1
        replay = store.enqueue_keyed(key, "new", _env(key), ANSWER)
        assert replay.record is not None and replay.record.request_hash == "new"


def test_a_refused_enqueue_stores_no_answer(store: Store, pg_url: str) -> None:
    store.set_enqueue_limit("q", 1)  # the warm-up job fills it
    with pytest.raises(Backpressure):
        store.enqueue_keyed("r:key", "h", _env("r:key"), ANSWER)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM api_idempotency WHERE scope_key = %s",
                            ("r:key",)).fetchone() == (0,)
