"""WAL checkpoints off the writers' path.

SQLite's automatic checkpoint runs inside the commit that crosses the WAL size limit: that
commit copies the whole WAL into the database file and fsyncs it, and the thread that
made it (a worker's dispatcher, a producer) waits tens of milliseconds. A drain of 20,000
jobs spent ~6 % of its store time in such commits. Here a daemon thread on its own
connection runs a PASSIVE checkpoint every several thousand changed rows; in WAL mode that neither
blocks writers nor waits for readers, and the next write after a complete one starts the
WAL over. SQLite's own automatic checkpoint stays armed (at a larger size) in case this
thread falls behind.

A reader that holds a read transaction for minutes (a report, a backup, a console left on
a snapshot) stops every checkpoint at the frame it reads: the WAL only grows, and a WAL
file never shrinks on its own, so it kept its largest size after the reader left. Two
things bound it again. `PRAGMA journal_size_limit` (connection.py) cuts the file back to
`WAL_SIZE_LIMIT` whenever a writer starts the WAL over; and when a round finds the file
past that limit with every frame copied (nobody reads an older snapshot) it asks for
`wal_checkpoint(TRUNCATE)` with no busy wait. TRUNCATE, not RESTART and a later cut: it
ends at zero bytes at once rather than waiting for the next writer. No busy wait, because
TRUNCATE holds the write lock while it waits for readers to leave the WAL: waiting would
stall every writer behind a reader, while giving up at once costs only a retry on a later
round. What it holds the lock for otherwise is the copy of the few frames written since
the PASSIVE pass, one fsync and the truncation, and this process's writers wait for it on
the store's own write lock rather than in SQLite's polling busy handler. While the file
stays past the limit the thread re-checks every `RECHECK_S` without waiting for writes,
so a store that went quiet when its reader left still shrinks.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from headgate.adapters.shared.queries import load

log = logging.getLogger("headgate.sqlite")

# Rows changed (counter rows included) between two checkpoints: ~2,000 single-job commits
# (~20 MB of WAL) or ~3 batches of 1,000 jobs, below the automatic limit (connection.py).
# Checkpointing every 2,000 cost batch enqueues ~5 %: each batch's pages were copied
# while the next one was written.
EVERY_CHANGES = 8_000
# Past this the WAL file is cut back. Above what normal work reaches (a checkpoint every
# ~20 MB, the automatic one at ~40 MB), so only a WAL a reader held open is truncated.
WAL_SIZE_LIMIT = 64 * 1024 * 1024
RECHECK_S = 5.0

Q = load(__name__)
NO_BUSY_WAIT = Q["no_busy_wait"]
CHECKPOINT_PASSIVE = Q["checkpoint_passive"]
CHECKPOINT_TRUNCATE = Q["checkpoint_truncate"]


@dataclass(frozen=True, slots=True)
class Round:
    """One checkpoint round: the WAL's frames, those now in the database file, whether
    the file was truncated and its size afterwards."""

    frames: int
    copied: int
    truncated: bool
    wal_bytes: int

    @property
    def blocked(self) -> bool:
        """Frames a reader's older snapshot kept in the WAL (or another checkpoint ran)."""
        return self.frames < 0 or self.copied < self.frames


class Checkpointer:
    def __init__(self, connect: Callable[[], sqlite3.Connection],
                 every_changes: int = EVERY_CHANGES, *, wal_path: str | None = None,
                 wal_limit: int = WAL_SIZE_LIMIT,
                 write_lock: AbstractContextManager[object] | None = None) -> None:
        self._connect = connect
        self.every_changes = every_changes
        self.wal_path = wal_path
        self.wal_limit = wal_limit
        self._write_lock: AbstractContextManager[object] = write_lock or nullcontext()
        self.checkpoints = 0
        self.truncations = 0
        self._over_limit = False
        self._conn: sqlite3.Connection | None = None
        self._round_lock = threading.Lock()
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

    def wal_bytes(self) -> int | None:
        """The WAL file's size on disk (0 when there is none)."""
        if self.wal_path is None:
            return None
        try:
            return os.path.getsize(self.wal_path)
        except OSError:
            return 0

    def run_once(self) -> Round:
        """One round: a PASSIVE checkpoint, then TRUNCATE if the file is past the limit
        and nothing was left uncopied. The thread's loop calls this; so may anyone."""
        with self._round_lock:
            if self._conn is None:
                self._conn = self._connect()
                # TRUNCATE must give up at once rather than wait (module docstring).
                self._conn.execute(NO_BUSY_WAIT)
            _busy, frames, copied = self._conn.execute(CHECKPOINT_PASSIVE).fetchone()
            self.checkpoints += 1
            truncated = False
            size = self.wal_bytes()
            if size is not None and size > self.wal_limit and 0 <= copied == frames:
                with self._write_lock:
                    busy, frames, copied = self._conn.execute(CHECKPOINT_TRUNCATE).fetchone()
                truncated = busy == 0
                self.truncations += truncated
                size = self.wal_bytes()
            self._over_limit = size is not None and size > self.wal_limit
            return Round(int(frames), int(copied), truncated, size or 0)

    def _run(self) -> None:
        while True:
            # A file left past the limit is looked at again even if nobody writes.
            self._due.wait(RECHECK_S if self._over_limit else None)
            self._due.clear()
            if self._closed:
                break
            try:
                self.run_once()
            except sqlite3.Error as exc:  # the automatic checkpoint still covers us
                log.debug("background checkpoint failed: %s", exc)
        with self._round_lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._due.set()
        if thread is not None:
            thread.join(timeout=5)
        with self._round_lock:  # a round run without the thread (run_once)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
