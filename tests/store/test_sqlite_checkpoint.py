"""SQLite's WAL is checkpointed by the store's own thread, not inside a writer's commit
(headgate/adapters/sqlite/checkpoint.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from support import wait_for

from headgate import Client, Envelope, State, open_store


def test_the_wal_reaches_the_database_file_without_the_writer_checkpointing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hg.db"
    store = open_store(str(path))
    try:
        client = Client(store)
        client.enqueue("k", b"warm-up")
        # The writer's automatic checkpoint is off: only the checkpointer thread can
        # copy the WAL into the database file (nothing else writes that file in WAL mode).
        store.db.connection().execute("PRAGMA wal_autocheckpoint = 0")  # type: ignore[attr-defined]
        before = os.path.getsize(path)
        # 9,000 changed rows: past the checkpointer's 8,000 (a batch writes its counters
        # once, so a row is about one change).
        for batch in range(9):
            client.enqueue_many([Envelope(kind="k", payload=b"%d-%d" % (batch, i))
                                 for i in range(1000)])
        checkpointer = store.db.checkpointer  # type: ignore[attr-defined]
        wait_for(lambda: checkpointer.checkpoints >= 1, 10, "a background checkpoint")
        wait_for(lambda: os.path.getsize(path) > before + 100_000, 10,
                 "the jobs' pages in the database file")
        assert store.counts("default")[State.AVAILABLE.value] == 9001
    finally:
        store.close()
    assert not any(t.name == "headgate-checkpoint" for t in threading.enumerate())


def test_a_store_that_writes_little_starts_no_thread(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "hg.db"))
    try:
        Client(store).enqueue("k", b"one")
        assert store.db.checkpointer.checkpoints == 0  # type: ignore[attr-defined]
        assert not any(t.name == "headgate-checkpoint" for t in threading.enumerate())
    finally:
        store.close()
