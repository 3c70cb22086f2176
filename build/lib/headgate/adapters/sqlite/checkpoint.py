"""WAL checkpoints off the writers' path.

SQLite's automatic checkpoint runs inside the commit that crosses the WAL size limit: that
commit copies the whole WAL into the database file and fsyncs it, and the thread that
made it (a worker's dispatcher, a producer) waits tens of milliseconds. A drain of 20,000
jobs spent ~6 % of its store time in such commits. Here a daemon thread on its own
connection runs a PASSIVE checkpoint every several thousand changed rows; in WAL mode that neither
blocks writers nor waits for readers, and the next write after a complete one starts the
WAL over. SQLite's own automatic checkpoint stays armed (at a larger size) in case this
thread falls behind.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

log = logging.getLogger("headgate.sqlite")

# Rows changed (counter rows included) between two checkpoints: ~2,000 single-job commits
# (~20 MB of WAL) or ~3 batches of 1,000 jobs, below the automatic limit (connection.py).
# Checkpointing every 2,000 cost batch enqueues ~5 %: each batch's pages were copied
# while the next one was written.
EVERY_CHANGES = 8_000


class Checkpointer:
    def __init__(self, connect: Callable[[], sqlite3.Connection],
                 every_changes: int = EVERY_CHANGES) -> None:
        self._connect = connect
        self.every_changes = every_changes
        self.checkpoints = 0
        self._changes = 0
        self._due = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def committed(self, changes: int) -> None:
        """Called after each commit with the rows it changed; an unlocked count (a lost
        update only moves a checkpoint a little)."""
        self._changes += changes
        if self._changes >= self.every_changes:
            self._changes = 0
            self._wake()

    def _wake(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._closed:
                    self._thread = threading.Thread(
                        target=self._run, name="headgate-checkpoint", daemon=True)
                    self._thread.start()
        self._due.set()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        while True:
            self._due.wait()
            self._due.clear()
            if self._closed:
                break
            try:
                if conn is None:
                    conn = self._connect()
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.checkpoints += 1
            except sqlite3.Error as exc:  # the automatic checkpoint still covers us
                log.debug("background checkpoint failed: %s", exc)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._due.set()
        if thread is not None:
            thread.join(timeout=5)
