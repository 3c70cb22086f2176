"""bench/cpu_meter.py around the peer harness, as bench/compare.sh runs every harness row:
the W1-W3 lines gain CPU microseconds per job by part over the window the jobs/s times
(the producer's loop; the worker from launch to the N-th job, the bench's own wait loop
apart), the server's part on PostgreSQL, and nothing on W4. Real harness, real headgate
rows at a tiny N; skipped where the harness is not beside the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = Path(os.environ.get("HG_PEERS_DIR") or ROOT.parent / "shared" / "peers")
METER = ROOT / "bench" / "cpu_meter.py"

needs_harness = pytest.mark.skipif(not (HARNESS / "common.py").exists(),
                                   reason="the peer harness is not beside the checkout")


def meter(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HG_SRC"}
    env["HG_PEERS_DIR"] = str(HARNESS)
    return subprocess.run([sys.executable, str(METER), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def rows(tmp_path: Path, *args: str) -> dict[str, dict[str, Any]]:
    done = meter(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    return {r["workload"]: r for r in map(json.loads, done.stdout.splitlines())}


def medians(rec: dict[str, Any], key: str = "cpu_us_per_job") -> dict[str, float]:
    return {part: agg["median"] for part, agg in rec[key].items()}


@needs_harness
def test_sqlite_rows_gain_the_producers_and_the_workers_cpu_per_job(tmp_path: Path) -> None:
    out = rows(tmp_path, str(ROOT / "bench" / "peers_headgate.py"), "--store", "sqlite",
               "--n", "200", "--runs", "2", "--lat-jobs", "5")
    assert set(out) == {"W1", "W2", "W3", "W4"}
    for w in ("W1", "W2"):
        cpu = out[w]["cpu_us_per_job"]
        assert set(cpu) == {"client", "total"}  # no worker runs, no server on SQLite
        assert len(cpu["client"]["runs"]) == 2 and all(r > 0 for r in cpu["client"]["runs"])
        assert cpu["total"] == cpu["client"]
    w3 = out["W3"]
    assert w3["exactly_once"]
    cpu = medians(w3)
    # The drain's total is the worker's: the bench only waits, reported apart.
    assert set(cpu) == {"harness", "worker", "total"}
    assert cpu["worker"] > 0 and cpu["total"] == cpu["worker"]
    # From the first job on, the worker's start-up (imports, migrations check) is out.
    assert medians(w3, "cpu_us_per_job_after_first")["worker"] < cpu["worker"]
    assert w3["cpu_meter"]["window"] == "worker launch -> N-th side effect"
    assert not any(k.startswith("cpu") for k in out["W4"])


@needs_harness
def test_postgresql_rows_count_the_servers_processes(tmp_path: Path) -> None:
    url = os.environ.get("HG_TEST_PG")
    if not url:
        pytest.skip("HG_TEST_PG not set")
    found = meter(tmp_path, "--find-postmaster", url)
    if found.returncode != 0:
        pytest.skip(f"the test server's processes are not on this machine: {found.stderr}")
    out = rows(tmp_path, "--postmaster", found.stdout.strip(),
               str(ROOT / "bench" / "peers_headgate.py"), "--store", "pg", "--pg-url", url,
               "--n", "100", "--runs", "1", "--workloads", "w1,w3")
    w1, w3 = medians(out["W1"]), medians(out["W3"])
    assert set(w1) == {"client", "server", "total"}
    assert w1["server"] > 0 and w1["total"] == pytest.approx(w1["client"] + w1["server"],
                                                             abs=0.02)
    assert set(w3) == {"harness", "worker", "server", "total"}
    assert w3["server"] > 0 and w3["total"] == pytest.approx(w3["worker"] + w3["server"],
                                                             abs=0.02)
    assert out["W1"]["cpu_meter"]["postmaster"] == int(found.stdout)


def test_a_server_that_cannot_be_found_is_one_error_line(tmp_path: Path) -> None:
    gone = meter(tmp_path, "--postmaster", "999999999", str(ROOT / "bench" / "peers_headgate.py"))
    assert gone.returncode == 1
    assert gone.stderr.splitlines() == ["cpu_meter: no process 999999999"]
    down = meter(tmp_path, "--find-postmaster", "postgresql://nobody@127.0.0.1:1/none")
    assert down.returncode == 1 and "Traceback" not in down.stderr
    assert len(down.stderr.splitlines()) == 1
    assert down.stderr.startswith("cpu_meter: no postmaster for postgresql://nobody@")


@needs_harness
def test_headgates_own_bench_measures_cpu_by_itself_with_its_flag(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HG_SRC"}
    env["HG_PEERS_DIR"] = str(HARNESS)
    argv = [sys.executable, str(ROOT / "bench" / "peers_headgate.py"), "--store", "sqlite",
            "--n", "100", "--runs", "1", "--workloads", "w1"]
    with_flag, without = (subprocess.run(a, cwd=tmp_path, env=env, capture_output=True,
                                         text=True, timeout=300) for a in (argv + ["--cpu"], argv))
    assert with_flag.returncode == without.returncode == 0, with_flag.stderr + without.stderr
    assert medians(json.loads(with_flag.stdout))["client"] > 0
    assert "cpu_us_per_job" not in json.loads(without.stdout)
