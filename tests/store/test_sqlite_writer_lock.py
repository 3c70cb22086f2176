"""SQLite's writers queue on an flock beside the database before `BEGIN IMMEDIATE`
(headgate/adapters/sqlite/writer_lock.py), so headgate processes hand the one write
lock to each other at once instead of through SQLite's busy handler. The figures are
bench/sqlite_writers.py's; these tests pin the mechanism and its failure modes."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import headgate
from headgate.adapters.sqlite.connection import Database
from headgate.adapters.sqlite.writer_lock import WriterLock
from headgate.core import StoreUnavailable


def _held_elsewhere(path: Path) -> bool:
    """Whether another open file description holds the flock (as another process's)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_write_transaction_holds_the_file_beside_the_database(tmp_path: Path) -> None:
    db_path = tmp_path / "w.db"
    store = headgate.open_store(f"sqlite:///{db_path}")
    lock_file = Path(f"{db_path}-writer")
    try:
        db = store.db  # type: ignore[attr-defined]
        with db.write() as (conn, _now):
            conn.execute("SELECT 1").fetchone()
            assert _held_elsewhere(lock_file)
        assert not _held_elsewhere(lock_file)
        # A failed transaction lets go too.
        with pytest.raises(RuntimeError), db.write():
            raise RuntimeError("boom")
        assert not _held_elsewhere(lock_file)
    finally:
        store.close()


HOLDER = textwrap.dedent("""
    import sys, time
    from headgate.adapters.sqlite.connection import Database
    db = Database(sys.argv[1])
    with db.write():
        print("holding", flush=True)
        time.sleep(float(sys.argv[2]))
    db.close()
""")


def test_a_writer_held_out_by_another_process_is_told_unavailable(tmp_path: Path) -> None:
    """A process stopped inside a transaction costs the others a typed error after their
    busy timeout, never a hang; the write goes through once it lets go."""
    db_path = str(tmp_path / "h.db")
    headgate.open_store(f"sqlite:///{db_path}").close()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, db_path, "3"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        db = Database(db_path, busy_timeout_ms=300)
        try:
            with pytest.raises(StoreUnavailable, match="another process's writer"), \
                    db.write():
                pass
            holder.wait(timeout=30)
            with db.write() as (conn, _now):
                conn.execute("SELECT 1").fetchone()
        finally:
            db.close()
    finally:
        if holder.poll() is None:
            holder.kill()


def test_threads_and_a_second_store_on_one_file_all_get_their_turn(tmp_path: Path) -> None:
    """Two stores of one process on one file lock each other out as two processes do;
    every write of four threads across them commits."""
    db_path = tmp_path / "two.db"
    first = headgate.open_store(f"sqlite:///{db_path}")
    second = headgate.open_store(f"sqlite:///{db_path}")
    errors: list[BaseException] = []

    def write(store: headgate.Store, tag: int) -> None:
        try:
            client = headgate.Client(store)
            for i in range(50):
                client.enqueue("k", b"%d-%d" % (tag, i), queue="q")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s, n))
               for n, s in enumerate((first, second, first, second))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        assert first.counts("q").get("available") == 200
    finally:
        first.close()
        second.close()


def test_where_no_lock_file_can_be_made_the_process_lock_still_serves(
        tmp_path: Path) -> None:
    """No lock file where none can be made (here: a path through a file): the lock
    still admits one holder at a time within the process."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    lock = WriterLock(str(blocker / "db"), timeout_s=1.0)
    order: list[str] = []
    with lock:
        other = threading.Thread(target=lambda: (lock.__enter__(), order.append("other"),
                                                 lock.__exit__(None, None, None)))
        other.start()
        other.join(0.2)
        order.append("first")
    other.join(10)
    assert order == ["first", "other"]
    assert not (blocker / "db-writer").exists()
    lock.close()


def test_a_forked_child_takes_the_lock_on_its_own_description(tmp_path: Path) -> None:
    """A child forked from a process that already opened the lock file must not share
    its flock: holding it in the child keeps the parent out."""
    lock = WriterLock(str(tmp_path / "f.db"), timeout_s=1.0)
    with lock:  # the parent opens (and takes, then leaves) the file
        pass
    parent_fd = lock._fd  # noqa: SLF001 - the parent's own open file description
    assert parent_fd is not None
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: hold the lock until the parent has tried
        try:
            with lock:
                os.write(ready_w, b"1")
                os.read(done_r, 1)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"1"
        with pytest.raises(BlockingIOError):
            fcntl.flock(parent_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.write(done_w, b"1")
        os.waitpid(pid, 0)
        for fd in (ready_r, ready_w, done_r, done_w):
            os.close(fd)
    fcntl.flock(parent_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again once the child left
    fcntl.flock(parent_fd, fcntl.LOCK_UN)
    lock.close()
