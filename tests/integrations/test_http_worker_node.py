"""The reference worker in another language (examples/http_worker.mjs, Node.js standard
library only) against a real `headgate serve`, beside a real Python `headgate worker`,
on both engines: the two drain one queue under a rate class and a concurrency ceiling
and both limits hold across them, judged from the store's records of when each run
started and ended; and a `kill -9` of the Node worker mid-job gets its job reclaimed by
the server's duties and run by the Python worker."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from integration_support import TESTS_DIR, serve, worker

import headgate
from headgate.core import State

NODE = shutil.which("node") or shutil.which("nodejs")
EXAMPLE = TESTS_DIR.parent / "examples" / "http_worker.mjs"
KIND = "integrations_app.polyglot"
# The rate class and ceiling both workers are held to.
LIMIT, WINDOW_MS, BURST = 4, 1_000, 2
CEILING = 2

pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed "
                                "(scripts/setup.sh --test installs Debian's nodejs)")


@contextmanager
def node_worker(url: str, tmp_path: Path, *args: str
                ) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """examples/http_worker.mjs against `url`; yields it and its worker id."""
    id_file = tmp_path / f"node-{time.monotonic_ns()}.id"
    err = tmp_path / f"node-{time.monotonic_ns()}.err"
    assert NODE is not None
    with err.open("wb") as out:
        proc = subprocess.Popen([NODE, str(EXAMPLE), "--url", url, "--queues", "polyglot",
                                 "--kinds", KIND, "--id-file", str(id_file), *args],
                                stdout=subprocess.DEVNULL, stderr=out)
    try:
        deadline = time.monotonic() + 30
        while not id_file.exists() or not id_file.read_text():
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        yield proc, id_file.read_text()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def wait_for(check, what: str, timeout: float = 90.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def policies(url: str) -> None:
    api = url + "/api/v1"
    key = {"Idempotency-Key": os.urandom(8).hex()}
    r = requests.put(f"{api}/rate-classes/polyglot", headers=key, timeout=10,
                     json={"limit": LIMIT, "window_ms": WINDOW_MS, "burst": BURST})
    assert r.status_code == 200, r.text
    key = {"Idempotency-Key": os.urandom(8).hex()}
    r = requests.put(f"{api}/concurrency-limits/polyglot", headers=key, timeout=10,
                     json={"queue": "polyglot", "max_concurrent": CEILING,
                           "on_saturated": "queue"})
    assert r.status_code == 200, r.text


def enqueue(store: headgate.Store, ms: int, n: int) -> list[str]:
    """`n` jobs of the polyglot task, as its Python producer would write them."""
    client = headgate.Client(store)
    payload = b'{"args":[%d],"kwargs":{}}' % ms
    return [client.enqueue(KIND, payload, queue="polyglot", rate_class="polyglot")
            for _ in range(n)]


def test_node_and_python_workers_share_the_rate_and_the_ceiling(
        store_url: str, tmp_path: Path) -> None:
    store = headgate.open_store(store_url)
    try:
        with serve(store_url, tmp_path) as url:
            policies(url)
            ids = enqueue(store, 150, 24)
            with node_worker(url, tmp_path, "--capacity", "3") as (_node, node_id), \
                    worker(store_url, tmp_path, "--queues", "polyglot", "--concurrency", "3",
                           "--no-duties"):
                jobs = wait_for(lambda: _all_done(store, ids), "every job to complete")
        runs = sorted((j.attempted_at_ms, j.finalized_at_ms, j.worker_id) for j in jobs)
        assert all(a is not None and f is not None for a, f, _ in runs)
        # Both kinds of worker ran jobs: the Node worker under its own id.
        ran = {w for _, _, w in runs}
        assert node_id in ran and len(ran) == 2, ran
        # The ceiling: never more than CEILING runs overlap (half-open [start, end)).
        events = sorted([(a, 1) for a, _, _ in runs] + [(f, -1) for _, f, _ in runs],
                        key=lambda e: (e[0], e[1]))
        depth = peak = 0
        for _, step in events:
            depth += step
            peak = max(peak, depth)
        assert peak <= CEILING, peak
        # The rate: between any two admissions, no more than the bucket allows.
        starts = [a for a, _, _ in runs]
        for i in range(len(starts)):
            for j in range(i, len(starts)):
                allowed = BURST + (starts[j] - starts[i]) * LIMIT / WINDOW_MS
                assert j - i + 1 <= allowed + 1e-9, (i, j, starts[i], starts[j])
    finally:
        store.close()


def _all_done(store: headgate.Store, ids: list[str]) -> list[headgate.Job] | None:
    jobs = [store.get_job(i) for i in ids]
    if all(j is not None and j.state is State.COMPLETED for j in jobs):
        return [j for j in jobs if j is not None]
    return None


def test_kill_9_of_the_node_worker_mid_job_is_reclaimed_and_run_by_python(
        store_url: str, tmp_path: Path) -> None:
    store = headgate.open_store(store_url)
    try:
        with serve(store_url, tmp_path) as url:
            [job_id] = enqueue(store, 600_000, 1)  # Node sleeps on it for ten minutes
            with node_worker(url, tmp_path, "--lease-ms", "3000") as (node, node_id):
                running = wait_for(lambda: _running_on(store, job_id, node_id),
                                   "the Node worker to run the job")
                progress = store.get_progress(job_id)
                os.kill(node.pid, signal.SIGKILL)
                node.wait(10)
            with worker(store_url, tmp_path, "--queues", "polyglot", "--no-duties"):
                done = wait_for(lambda: _completed(store, job_id), "the job to run elsewhere")
        assert progress is not None and progress.message == "sleeping"
        # The killed run's lease ran out and was charged as a crash, once, to the Node
        # worker. A loaded machine can let another lease lapse too (Node's before the
        # kill, served late, or even the Python worker's), each its own run: so what
        # holds is one charge per lost run, not a count of exactly one.
        losses = [e for e in done.errors if e["outcome"] == "lease_lost"]
        runs = [e["attempt"] for e in losses]
        assert len(runs) == len(set(runs)), losses  # no run charged twice
        assert done.crash_attempt == len(losses), (done.crash_attempt, losses)
        by_node = [e for e in losses if e["worker"] == node_id and e["attempt"] >= running.fence]
        assert by_node, losses  # the kill's loss, at the run Node held or a later one of it
        assert done.fence > max(runs)  # the run that completed came after every loss
        assert done.worker_id != node_id
        result = store.get_result(job_id)
        assert result is not None and json.loads(result.bytes) == {"ran_by": "python"}
    finally:
        store.close()


def _running_on(store: headgate.Store, job_id: str, worker_id: str) -> headgate.Job | None:
    job = store.get_job(job_id)
    if job is not None and job.state is State.RUNNING and job.worker_id == worker_id \
            and store.get_progress(job_id) is not None:
        return job
    return None


def _completed(store: headgate.Store, job_id: str) -> headgate.Job | None:
    job = store.get_job(job_id)
    return job if job is not None and job.state is State.COMPLETED else None
