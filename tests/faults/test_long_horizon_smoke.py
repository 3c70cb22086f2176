"""bench/long_horizon.py at a tiny size: the calibration drain, a real worker and a real
polled `headgate serve`, seconds-long buckets. What it checks is the record's shape
(every bucket's series, the summary's verdicts, the store's own sizes on each engine)
and the chart beside it, not the figures: those need the hour on a quiet machine."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "long_horizon.py"

pytestmark = [pytest.mark.soak, pytest.mark.timeout(300)]

ROW_KEYS = {"bucket", "t_s", "produced", "completed", "backlog", "pickup_p50_ms",
            "pickup_p99_ms", "worker_rss_mb", "serve_rss_mb", "polls", "poll_errors",
            "retained_finished", "db_bytes"}
ENGINE_KEYS = {
    "sqlite": {"wal_bytes", "page_count", "freelist_count", "jobs_table_bytes",
               "jobs_index_bytes"},
    "pg": {"jobs_total_bytes", "jobs_heap_bytes", "jobs_index_bytes", "jobs_dead_tuples",
           "jobs_live_tuples"},
}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HG_PG"}
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True,
                          text=True, timeout=240, check=False, env=env, cwd=ROOT)


@pytest.mark.parametrize("engine", ["sqlite", "pg"])
def test_a_tiny_run_records_every_series_and_draws_them(engine: str, tmp_path: Path) -> None:
    if engine == "pg" and not os.environ.get("HG_TEST_PG"):
        pytest.skip("needs HG_TEST_PG")
    out = tmp_path / "run"
    done = run("--store", engine, "--out", str(out), "--minutes", "0.1", "--bucket-s", "1.5",
               "--calib-jobs", "200", "--calib-runs", "2", "--fraction", "0.02",
               "--retention-s", "1", "--warmup-s", "0", "--poll-s", "0.5")
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "long_horizon.json").read_text())

    # The rate came from the median of the calibration drains, at the fraction asked for.
    calibration = record["calibration"]
    drains = [d["jobs_per_s"] for d in calibration["runs"]]
    assert calibration["jobs"] == 200 and len(drains) == 2 and min(drains) > 0
    assert calibration["jobs_per_s"] == pytest.approx(sum(drains) / 2, abs=0.1)
    assert record["rate"] == pytest.approx(calibration["jobs_per_s"] * 0.02, abs=0.1)

    rows = record["rows"]
    assert [r["bucket"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        missing = (ROW_KEYS | ENGINE_KEYS[engine]) - row.keys()
        assert not missing, missing
        assert row["worker_rss_mb"] > 0 and row["serve_rss_mb"] > 0
    other = "pg" if engine == "sqlite" else "sqlite"
    assert not (ENGINE_KEYS[other] - ENGINE_KEYS[engine]) & rows[-1].keys()
    assert "jobs" in rows[-1]["tables"]
    # Completions are the handler's own records: every one counted in some bucket, none
    # beyond what the producer enqueued, and the server answered the monitor's polls.
    assert sum(r["completed"] for r in rows) == record["completed"]
    assert 0 < record["completed"] <= record["produced"]
    assert sum(r["polls"] for r in rows) > 0
    assert record["worker_exit_code"] == 0 and record["serve_exit_code"] == 0

    summary = record["summary"]
    assert "flat when" in summary["rule"]
    assert summary["steady_buckets"] == 4 and summary["quarter_buckets"] == 1
    # Read in every bucket, so each has a verdict; a bucket in which a loaded machine
    # completed nothing has no latency, and its series may have none.
    for key in ("worker_rss_mb", "serve_rss_mb", "retained_finished", "db_bytes"):
        entry = summary["series"][key]
        assert isinstance(entry["flat"], bool), (key, entry)
        assert entry["first_quarter_median"] is not None
    for key in ("pickup_p50_ms", "pickup_p99_ms"):
        assert summary["series"][key]["flat"] in (True, False, None)
    assert isinstance(summary["completions"]["keeps_pace"], bool)
    assert summary["retention"]["checked_buckets"] == 4
    assert isinstance(summary["retention"]["keeps_up"], bool)
    assert summary["all_flat"] in (True, False, None)

    # The chart: an SVG document with one titled chart per series, each with its line.
    root = ET.fromstring((out / "long_horizon.svg").read_text())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    for entry in summary["series"].values():
        assert any(t.startswith(entry["label"]) for t in texts), entry["label"]
    lines = list(root.iter("{http://www.w3.org/2000/svg}polyline"))
    assert len(lines) >= len(summary["series"]) + 1
    assert (out / "worker.log").exists() and (out / "serve.log").exists()


@pytest.mark.parametrize("args, words", [
    (["--minutes", "0"], "must be positive"),
    (["--fraction", "1.5"], "--fraction must be in (0, 1]"),
    (["--store", "pg", "--pg-url", ""], "--store pg needs --pg-url"),
])
def test_refused_options_are_one_usage_error(args: list[str], words: str,
                                             tmp_path: Path) -> None:
    done = run("--out", str(tmp_path / "run"), *args)
    assert done.returncode == 2
    assert words in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_the_wal_file_is_judged_by_its_size_limit_as_well() -> None:
    """The WAL file's size is a high-water mark the store cuts back to its limit: rising
    towards the limit is flat, past it (plus the floor) is not; other series keep the
    ratio rule."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        import long_horizon
    finally:
        sys.path.remove(str(BENCH.parent))
    from headgate.adapters.sqlite.checkpoint import WAL_SIZE_LIMIT

    args = argparse.Namespace(retention_s=0.0, warmup_s=0.0, bucket_s=60.0)

    def verdict(wal_last: int) -> dict[str, object]:
        rows = [{"t_s": 60.0 * (i + 1), "wal_bytes": 20 << 20 if i < 4 else wal_last,
                 "db_bytes": 100 << 20 if i < 4 else 300 << 20} for i in range(8)]
        return long_horizon.summarize(rows, args, 100.0)["series"]

    under = verdict(WAL_SIZE_LIMIT - (1 << 20))
    assert under["wal_bytes"]["flat"] is True and under["wal_bytes"]["ratio"] > 2
    assert under["db_bytes"]["flat"] is False  # no cap: the ratio rule alone
    assert verdict(WAL_SIZE_LIMIT + (16 << 20))["wal_bytes"]["flat"] is False
