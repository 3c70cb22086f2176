"""bench/held_snapshot.py at a tiny size on SQLite, then bench/held_chart.py over its
JSON: the record's shape and the chart beside it, not the figures (those need ten
minutes on a quiet machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.soak, pytest.mark.timeout(300)]


def bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args],
                          capture_output=True, text=True, timeout=240, check=False,
                          env=env, cwd=ROOT)


def test_a_tiny_held_run_is_charted_beside_another(tmp_path: Path) -> None:
    run = tmp_path / "held.json"
    done = bench("held_snapshot.py", "--store", "sqlite", "--rate", "50", "--clean", "2",
                 "--hold", "3", "--released", "2", "--out", str(run))
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "record"
    done = bench("held_chart.py", "--out", str(out), f"one={run}", f"two={run}")
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.with_suffix(".json").read_text())
    assert set(record) == {"one", "two"}
    one = record["one"]
    seconds = len(one["per_second"]["completed"])
    assert seconds == 7 and len(one["per_second"]["backlog"]) == seconds
    assert one["phase_starts_s"] == {"held": 2, "released": 5}
    # The run stops its worker at the end: the last second's jobs may still wait.
    assert 0 < one["completed"] <= one["produced"] and one["completed_twice"] == 0
    svg = ET.fromstring(out.with_suffix(".svg").read_text())
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 4  # completions and backlog, for each of the two runs
    assert all(len(p.get("points", "").split()) == seconds for p in lines)

    # A run of an earlier record is carried into a new one as it is.
    again = tmp_path / "again"
    done = bench("held_chart.py", "--out", str(again), f"one={out.with_suffix('.json')}",
                 f"three={run}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(again.with_suffix(".json").read_text())["one"] == one

    bad = bench("held_chart.py", "--out", str(out), str(run))
    assert bad.returncode == 2 and "NAME=FILE" in bad.stderr
    missing = bench("held_chart.py", "--out", str(again), f"four={out.with_suffix('.json')}")
    assert missing.returncode == 2 and "four" in missing.stderr
