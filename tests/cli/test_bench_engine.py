"""bench/engine.py's concurrent ack_and_admit loops (--loops, --queues), run for real on
both engines: every job of every queue completed once (the benchmark checks the store's
counts per queue and exits non-zero otherwise), and refused combinations are one usage
error that runs nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "bench" / "engine.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ENGINE), *args], capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize("backend", ["sqlite", "pg"])
@pytest.mark.parametrize("variant", ["plain", "policies"])
def test_loops_drain_their_own_queues_exactly(backend: str, variant: str) -> None:
    if backend == "pg" and not os.environ.get("HG_TEST_PG"):
        pytest.skip("needs HG_TEST_PG")
    done = run("--store", backend, "--metric", "ack_and_admit", "--variant", variant,
               "--n", "301", "--runs", "1", "--capacity", "4", "--loops", "4",
               "--queues", "2")
    assert done.returncode == 0, done.stderr
    (line,) = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert (line["metric"], line["loops"], line["queues"], line["n"]) == (
        "ack_and_admit", 4, 2, 301)
    assert line["min"] > 0


@pytest.mark.parametrize("args, words", [
    (["--loops", "3", "--queues", "2"], "--loops must be a multiple of --queues"),
    (["--loops", "2", "--metric", "batch_enqueue"], "apply to the ack_and_admit and"),
    (["--loops", "0"], "must be >= 1"),
])
def test_refused_loop_options_are_one_usage_error(args: list[str], words: str) -> None:
    done = run("--store", "sqlite", *args)
    assert done.returncode == 2
    assert words in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_the_keyed_write_benchmark_stores_one_job_per_answered_request() -> None:
    # bench/keyed.py exits non-zero when a mode answered a request whose job is missing
    # (or stored one it did not answer): the combining model's savepoints and groups.
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "keyed.py"), "--threads", "3", "--seconds",
         "0.3", "--runs", "1", "--work-us", "20"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert [x["mode"] for x in lines] == ["direct[1 thread]", "direct", "combining"]
    assert all(x["min"] > 0 for x in lines)
    assert lines[2]["writes_per_transaction"] >= 1
