"""bench/compare_table.py's verdicts, as bench/compare.sh prints them: a target that
bounds CPU per job passes only when the throughput ratio and the CPU ratio both hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def w1(peer: str, jobs_per_s: float, cpu_us: float | None) -> str:
    rec: dict[str, object] = {"peer": peer, "workload": "W1", "median": jobs_per_s}
    if cpu_us is not None:
        rec["cpu_us_per_job"] = {"total": {"median": cpu_us}}
    return json.dumps(rec)


def sqlite_w1_verdict(tmp_path: Path, ours_cpu: float | None) -> str:
    (tmp_path / "headgate_sqlite.jsonl").write_text(w1("headgate[sqlite]", 9000, ours_cpu))
    (tmp_path / "huey.jsonl").write_text(w1("huey", 4000, 140.0))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "compare_table.py"),
                           str(tmp_path)], capture_output=True, text=True, check=True)
    (row,) = [r for r in done.stdout.splitlines() if "W1 single enqueue" in r]
    return row.split(" | ")[6]


@pytest.mark.parametrize(("ours_cpu", "verdict"), [
    (56.0, "PASS"),                         # 2.25× the jobs at 0.40× the CPU
    (100.0, "MISS (CPU per job 0.71×)"),    # the jobs, but not for half the CPU
    (None, "n/a (CPU per job not measured)"),
])
def test_a_throughput_target_holds_for_cpu_per_job_too(
        tmp_path: Path, ours_cpu: float | None, verdict: str) -> None:
    assert sqlite_w1_verdict(tmp_path, ours_cpu) == verdict
