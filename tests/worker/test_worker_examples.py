"""The README's quick start, as a user would run it: `examples/enqueue_demo.py` fills a
SQLite file, `headgate worker --app examples.shop:make_worker` works it off."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import headgate
from headgate import JobFilter, State

ROOT = Path(__file__).resolve().parents[2]


def test_example_shop_app_works_off_the_demo_mix(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/shop.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    subprocess.run([sys.executable, "examples/enqueue_demo.py", "--store", url, "-n", "6"],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=60)
    store = headgate.open_store(url)
    assert sum(store.counts().values()) == 36
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "headgate.cli", "worker", "--app",
             "examples.shop:make_worker", "--store", url],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            counts = store.counts()
            busy = sum(counts[s] for s in ("available", "running", "scheduled"))
            retrying = counts["retryable"]
            payments_retrying = len(store.list_jobs(
                JobFilter(state="retryable", kind="payment.capture")).jobs)
            if busy == 0 and retrying == payments_retrying:
                break
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()

    def jobs(kind: str) -> list[headgate.Job]:
        return store.list_jobs(JobFilter(kind=kind), limit=200).jobs

    reports = jobs("report.generate")
    assert {j.state for j in reports} == {State.COMPLETED}
    for job in reports:
        result = json.loads(store.get_result(job.id).bytes)
        progress = store.get_progress(job.id)
        assert progress.current == progress.total == result["orders"]
        assert json.loads(store.get_output(job.id).bytes)["partial"]["orders"] == progress.total

    emails = jobs("email.send")
    bounced = [j for j in emails if j.state is State.ARCHIVED]
    assert len(bounced) == 2  # rounds 0 and 4 mail a bouncing address
    assert all(j.errors[-1]["error"].startswith("hard bounce") for j in bounced)
    assert sum(j.state is State.COMPLETED for j in emails) == 16

    thumbs = jobs("thumbnail.render")  # isolated: rendered in child processes
    assert {j.state for j in thumbs} == {State.COMPLETED}
    assert all(json.loads(store.get_result(j.id).bytes)["sku"] for j in thumbs)

    payments = jobs("payment.capture")
    assert len(payments) == 5  # round 5's order was cancelled: revoked, i.e. deleted
    declined = [j for j in payments if j.errors and j.errors[-1]["error"] == "card declined"]
    assert len(declined) == 1 and declined[0].state is State.ARCHIVED
    for job in payments:
        for entry in job.errors:
            if entry["outcome"] == "retry":  # the flaky gateway, with its log line
                assert entry["error"].startswith("GatewayTimeout: payment gateway")
                assert any("capturing" in line for line in entry["logs"])
    store.close()
