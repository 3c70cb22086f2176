"""The queue headgate's SQLite writers wait in: one per process, one across processes.

SQLite lets one writer in at a time, and a writer that finds the database locked waits
in SQLite's busy handler, which retries after sleeps of 1, 2, 5, ... up to 100 ms.
Between processes that is neither prompt nor fair: a writer can sleep through many
turns of the others, and some processes commit far less than others
(`bench/sqlite_writers.py` measures it; docs/PERFORMANCE.md has the figures). So a
writer first takes this process's lock (threads queue there), then an flock on a file
beside the database (`<database>-writer`), which other headgate processes take the
same way, and only then `BEGIN IMMEDIATE`, which then finds the database free unless a
program other than headgate writes to it (that one still meets the busy handler).

The flock is taken without blocking and retried after sleeps of 50 us doubling to
1 ms, until the store's busy timeout: a blocking flock cannot time out, and a process
stopped inside a transaction must cost the others a `StoreUnavailable`, not a hang.
Where the file cannot be made (a read-only directory) or the platform has no flock,
only the process lock is taken.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from types import TracebackType

from headgate.core import StoreUnavailable

try:
    import fcntl
except ImportError:  # not a POSIX platform: the process lock alone
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("headgate.store")

SUFFIX = "-writer"
FIRST_SLEEP_S = 0.000_05
LONGEST_SLEEP_S = 0.001


class WriterLock:
    """A context manager: this process's lock, then the cross-process flock."""

    def __init__(self, db_path: str | None, timeout_s: float) -> None:
        self._local = threading.Lock()
        self._path = None if db_path is None or fcntl is None else db_path + SUFFIX
        self._fd: int | None = None
        self._opened = False
        self._pid = os.getpid()
        self.timeout_s = timeout_s

    def __enter__(self) -> WriterLock:
        self._local.acquire()
        try:
            self._take_file()
        except BaseException:
            self._local.release()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._local.release()

    def _take_file(self) -> None:
        fd = self._file()
        if fd is None:
            return
        sleep = FIRST_SLEEP_S
        deadline = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.timeout_s
            elif now >= deadline:
                raise StoreUnavailable("store unavailable: database is locked (another "
                                       f"process's writer held it for {self.timeout_s:g} s)")
            time.sleep(sleep)
            sleep = min(sleep * 2, LONGEST_SLEEP_S)

    def _file(self) -> int | None:
        """The lock file's descriptor, opened on first use (under the process lock), and
        again in a forked child: an inherited descriptor shares the parent's flock, so
        the two would not exclude each other and either's unlock would free both."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._fd = None  # the parent's: left open for it
            self._opened = False
        if not self._opened:
            self._opened = True
            if self._path is not None:
                try:
                    self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
                except OSError as exc:
                    log.debug("no cross-process writer lock at %s: %s", self._path, exc)
        return self._fd

    def close(self) -> None:
        with self._local:
            if self._fd is not None:
                os.close(self._fd)
            self._fd = None
            self._opened = False
