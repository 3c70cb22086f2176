"""Disk full on the SQLite volume: the database lives on a 4 MiB tmpfs that a filler
file exhausts. Enqueue fails with a typed, clear `StoreUnavailable` (and the API with a
503 JSON error), nothing is half-written or corrupt (`PRAGMA integrity_check`, counters
equal a recount), and once the filler is deleted enqueue and work carry on.

Needs root (to mount); skipped with the reason otherwise.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultkit import (
    ServeProc,
    WorkerProc,
    all_jobs,
    api_enqueue,
    audit,
    enqueue_fx,
    record,
    unfinished,
    wait_for,
)

import headgate
from headgate import StoreUnavailable

SIZE = "4m"


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("disk-full test needs root to mount a tmpfs")
    mnt = tmp_path / "vol"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def fill(path: Path) -> int:
    """Write `path` until the volume is full; the bytes written."""
    chunk = b"\0" * 65536
    written = 0
    with path.open("wb", buffering=0) as fh:
        while True:
            try:
                written += fh.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
        # Squeeze out the last partial chunk too.
        for size in (4096, 512, 1):
            while True:
                try:
                    written += fh.write(b"\0" * size)
                except OSError:
                    break
    return written


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def test_disk_full_fails_enqueue_cleanly_and_recovers(
    small_volume: Path, tmp_path: Path
) -> None:
    db = small_volume / "hg.db"
    url = f"sqlite:///{db}"
    store = headgate.open_store(url)
    procs: list = []
    try:
        ids = enqueue_fx(store, 50)
        api = ServeProc(url, tmp_path, "api")
        procs.append(api)
        api.wait_healthy()
        filler = small_volume / "filler"
        fill(filler)

        # Keep writing until the database itself needs a page it cannot get.
        client = headgate.Client(store)
        error: StoreUnavailable | None = None
        for i in range(2000):
            try:
                ids.append(client.enqueue("fx", json.dumps({"i": i, "pad": "x" * 8000})
                                          .encode()))
            except StoreUnavailable as exc:
                error = exc
                break
        assert error is not None, "the full volume never refused a write"
        assert str(error) == "store unavailable: database or disk is full"
        # Again, so the failure is steady, not a one-off; a batch is all-or-nothing.
        batch = [headgate.Envelope(kind="fx", payload=json.dumps(
            {"batch": i, "pad": "y" * 8000}).encode()) for i in range(20)]
        with pytest.raises(StoreUnavailable, match="disk is full"):
            client.enqueue_many(batch)
        status, body, hdrs = api_enqueue(api.base, "fx", json.dumps({"pad": "z" * 8000}).encode(),
                                         "while-full")
        assert status == 503, body
        assert hdrs["Content-Type"].startswith("application/json")
        assert json.loads(body)["error"] == "store unavailable: database or disk is full"
        # Reads still answer and nothing is corrupt or half-written.
        assert integrity(db) == "ok"
        assert len(all_jobs(store)) == len(ids)
        assert store.counts()["available"] == len(ids)
        assert api.running()

        filler.unlink()
        freed_at = time.monotonic()
        ids.append(client.enqueue("fx", b'{"after": "space returned"}'))
        recovered_s = time.monotonic() - freed_at  # the very next write succeeds
        ids += client.enqueue_many(batch)
        status, body, _ = api_enqueue(api.base, "fx", b'{"via": "api"}', "after-full")
        assert status == 201, body
        ids.append(json.loads(body)["id"])

        worker = WorkerProc(url, tmp_path, "w", ["--duties", "--concurrency", "4"])
        procs.append(worker)
        wait_for(lambda: unfinished(store) == 0, 60, "every job to finish")
        report = audit(store, ids, tmp_path)
        assert report.problems == []
        assert report.terminal == {"completed": len(ids)}
        assert worker.term() == 0
        assert integrity(db) == "ok"
        record("SQLite volume full (tmpfs 4 MiB)", "sqlite", faults=1, jobs=len(ids),
               lost=report.lost, duplicate_completions=report.duplicate_completions,
               reruns=report.reruns, runs=report.runs, recover_s=round(recovered_s, 3))
    finally:
        for proc in procs:
            proc.close()
        store.close()
