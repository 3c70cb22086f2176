"""SQLite: one process's writer threads take turns on the store's own lock instead of
colliding in BEGIN IMMEDIATE, where SQLite's busy handler sleeps (up to 100 ms a turn)
or, with no busy timeout, fails at once. A store opened with busy_timeout_ms=0 makes any
such collision a StoreUnavailable, so the threads below would fail without the lock."""

from __future__ import annotations

import threading
from pathlib import Path

from headgate import Client, Envelope
from headgate.adapters.sqlite import SqliteStore

THREADS = 6
PER_THREAD = 150


def test_writer_threads_of_one_process_never_meet_the_busy_handler(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "hg.db"), busy_timeout_ms=0)
    client = Client(store)
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def produce(t: int) -> None:
        start.wait()
        try:
            for i in range(PER_THREAD):
                client.enqueue_many([Envelope(kind="k", payload=b"%d-%d" % (t, i), queue="q")])
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        assert store.counts("q")["available"] == THREADS * PER_THREAD
    finally:
        store.close()
