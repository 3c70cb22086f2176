"""Database outages while a `headgate worker` and a `headgate serve` run on the store:

- PostgreSQL stopped (pg_ctl stop -m fast) mid-run and started again;
- SQLite locked by another process holding `BEGIN EXCLUSIVE` past the busy timeout.

Meanwhile the store raises the typed `StoreUnavailable`, the API answers 503 with a
JSON error, the worker logs and backs off; afterwards both carry on and no job is lost
or completed twice (at-least-once: a job whose ack could not be written runs again,
but only one run's completion is kept).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from faultkit import (
    Audit,
    Fleet,
    ServeProc,
    WorkerProc,
    api_enqueue,
    audit,
    ends,
    enqueue_fx,
    fleet_fixture,  # noqa: F401 - the `fleet` fixture
    http,
    pg_cluster_available,
    pg_start,
    pg_stop,
    record,
    unfinished,
    wait_for,
)

import headgate
from headgate import Store, StoreUnavailable

OUTAGE_S = 4.0  # longer than a job lease (1.5 s): leases run out during the outage


def assert_503_json(status: int, body: str, headers: dict[str, str]) -> dict:
    assert status == 503, (status, body)
    assert headers.get("Content-Type", "").startswith("application/json"), headers
    assert headers.get("Retry-After") == "1", headers
    doc = json.loads(body)
    assert doc["error"].startswith("store unavailable"), doc
    return doc


def worker_recovered(log: str, mark: int) -> bool:
    """A job finished (its ack written) after `mark`, the log's length at recovery."""
    return ": success in " in log[mark:]


def recovered_and_audited(api: ServeProc, worker: WorkerProc, store: Store, ids: list[str],
                          tmp_path: Path, mark: int, since: float, key: str
                          ) -> tuple[float, Audit]:
    """After the fault: one more job through the API, the worker finishes it (seconds
    since `since` returned) and then everything else, and every job completed once."""
    status, body, _ = api_enqueue(api.base, "fx", json.dumps({"o": "ok"}).encode(), key)
    assert status == 201, body
    ids.append(json.loads(body)["id"])
    wait_for(lambda: worker_recovered(worker.log(), mark), 60, "the worker to finish a job")
    worker_s = time.monotonic() - since
    wait_for(lambda: unfinished(store) == 0, 120, "every job to finish")
    report = audit(store, ids, tmp_path)
    assert report.problems == []
    assert report.terminal == {"completed": len(ids)}
    return worker_s, report


@pytest.mark.serial  # stops the shared cluster: every other process's PostgreSQL test fails
@pytest.mark.skipif(not pg_cluster_available(), reason="needs the test PostgreSQL cluster "
                    "(HG_TEST_PG_BIN/HG_TEST_PG_DATA, set by scripts/test.sh)")
def test_postgres_stopped_and_restarted_mid_run(
    store: Store, fleet: Fleet, tmp_path: Path, backend: str
) -> None:
    if backend != "pg":
        pytest.skip("a PostgreSQL server outage")
    ids = enqueue_fx(store, 400, ms=30)
    worker = fleet.worker("w", "--duties", "--concurrency", "4")
    api = fleet.serve("api")
    wait_for(lambda: ends(tmp_path) >= 100, 60, "100 jobs to finish")

    pg_stop()
    stopped = time.monotonic()
    try:
        # Each of these waits out the connection pool's timeout before failing: ask
        # them side by side.
        with ThreadPoolExecutor(4) as pool:
            direct = pool.submit(store.counts)
            asked = time.monotonic()
            ready = pool.submit(http, api.base + "/readyz")
            counts = pool.submit(http, api.base + "/api/v1/jobs/counts")
            enqueued = pool.submit(api_enqueue, api.base, "fx", b"{}", "during-outage")
            status, body, _ = ready.result()
            answered_503_s = time.monotonic() - asked
            assert status == 503, body
            assert_503_json(*counts.result())
            assert_503_json(*enqueued.result())
            with pytest.raises(StoreUnavailable):
                direct.result()
        # Now that the server is known down, the next request is answered at once
        # instead of waiting out the connection pool's timeout (10 s).
        asked_again = time.monotonic()
        assert_503_json(*http(api.base + "/api/v1/jobs/counts"))
        answered_again_s = time.monotonic() - asked_again
        assert answered_again_s < 5
        assert http(api.base + "/healthz")[0] == 200  # never touches the store
        wait_for(lambda: "store unavailable" in worker.log(), 20,
                 "the worker to log the outage")
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))
        assert worker.running() and api.running()
    finally:
        pg_start()
    started = time.monotonic()
    outage_s = started - stopped
    mark = len(worker.log())

    wait_for(lambda: http(api.base + "/readyz")[0] == 200, 60, "/readyz to recover")
    api_ready_s = time.monotonic() - started
    worker_s, report = recovered_and_audited(api, worker, store, ids, tmp_path, mark,
                                             started, "after-outage")
    log = worker.log()
    # It noticed the outage and backed off (which call failed first depends on timing).
    assert any(line in log for line in (
        "admit failed, backing off", "lease renewal failed", "acking ", "heartbeat failed",
        "combined ack and admit failed",
    )), log
    assert worker.term() == 0
    record("PostgreSQL stopped and restarted", "pg", faults=1, jobs=len(ids),
           lost=report.lost, duplicate_completions=report.duplicate_completions,
           reruns=report.reruns, runs=report.runs, outage_s=round(outage_s, 1),
           answered_503_s=round(answered_503_s, 1),
           answered_again_s=round(answered_again_s, 1),
           recover_s=round(max(api_ready_s, worker_s), 2))


LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
print("released", flush=True)
"""


def test_sqlite_locked_by_a_long_external_writer(
    store: Store, fleet: Fleet, tmp_path: Path, backend: str, store_url: str
) -> None:
    if backend != "sqlite":
        pytest.skip("SQLite's write lock")
    from headgate.adapters.sqlite.connection import BUSY_TIMEOUT_MS

    hold_s = BUSY_TIMEOUT_MS / 1000 + 3
    concurrency = 4
    # Jobs long enough that the worker is still acking when the lock is taken (about
    # six seconds of work remain at that point), however slowly the locker starts.
    ids = enqueue_fx(store, 200, ms=150)
    worker = fleet.worker("w", "--duties", "--concurrency", str(concurrency))
    api = fleet.serve("api")
    wait_for(lambda: ends(tmp_path) >= 40, 60, "40 jobs to finish")

    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, store_url.removeprefix("sqlite:///"), str(hold_s)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        locked = time.monotonic()
        at_lock = ends(tmp_path)
        assert at_lock + concurrency < len(ids), "the worker finished before the lock"
        # A write through the store and one through the API, side by side (each waits
        # out the busy timeout before giving up).
        answers: dict[str, object] = {}

        def via_api() -> None:
            answers["api"] = api_enqueue(api.base, "fx", b"{}", "during-lock")

        thread = threading.Thread(target=via_api)
        thread.start()
        with pytest.raises(StoreUnavailable, match="database is locked"):
            headgate.Client(store).enqueue("fx", b"{}")
        thread.join(30)
        answered_503_s = time.monotonic() - locked  # the busy timeout
        doc = assert_503_json(*answers["api"])  # type: ignore[misc]
        assert "database is locked" in doc["error"]
        # WAL: readers are not blocked by a writer, so reads (and /readyz) still answer.
        assert http(api.base + "/readyz")[0] == 200
        assert http(api.base + "/api/v1/jobs/counts")[0] == 200
        # The worker met the lock: past the busy timeout into it, with jobs left, it ran
        # only the jobs it held when the lock was taken (a claim is a write).
        assert ends(tmp_path) - at_lock <= concurrency
        assert locker.wait(hold_s + 30) == 0
    finally:
        if locker.poll() is None:
            locker.kill()
            locker.wait()
    released = time.monotonic()
    mark = len(worker.log())
    worker_s, report = recovered_and_audited(api, worker, store, ids, tmp_path, mark,
                                             released, "after-lock")
    assert worker.running() and api.running()
    assert worker.term() == 0
    record("SQLite locked by an external writer", "sqlite", faults=1, jobs=len(ids),
           lost=report.lost, duplicate_completions=report.duplicate_completions,
           reruns=report.reruns, runs=report.runs, outage_s=round(released - locked, 1),
           answered_503_s=round(answered_503_s, 1),
           recover_s=round(worker_s, 2))
