"""bench/merge_rounds.py, as bench/compare.sh runs it: the rounds' lines of a row become
one line per workload whose figures are recomputed over every round, so the table's
medians are the rounds' medians and a failed exactly-once check in any round shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def line(workload: str, runs: list[float], **extra: object) -> str:
    return json.dumps({"peer": "headgate[pg]", "n": 100, "runs_requested": 1,
                       "workload": workload, "median": runs[0], "min": runs[0],
                       "max": runs[0], "runs": runs, **extra})


def test_rounds_are_merged_per_workload_with_their_figures_recomputed(tmp_path: Path) -> None:
    out = tmp_path / "headgate_pg.jsonl"
    rounds = [
        line("W1", [900.0]),
        line("W3", [500.0], lost=[0], exactly_once=True,
             after_first_job={"median": 520.0, "min": 520.0, "max": 520.0, "runs": [520.0]}),
        line("W1", [1100.0]),
        line("W3", [700.0], lost=[2], exactly_once=False,
             after_first_job={"median": 720.0, "min": 720.0, "max": 720.0, "runs": [720.0]}),
        line("W1", [1000.0]),
    ]
    out.write_text("\n".join(rounds) + "\n")
    subprocess.run([sys.executable, str(ROOT / "bench" / "merge_rounds.py"), str(out)],
                   check=True, timeout=60)

    merged = {r["workload"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(merged) == {"W1", "W3"}
    w1, w3 = merged["W1"], merged["W3"]
    assert (w1["median"], w1["min"], w1["max"]) == (1000.0, 900.0, 1100.0)
    assert w1["runs"] == [900.0, 1100.0, 1000.0] and w1["rounds"] == 3
    assert w1["runs_requested"] == 3
    assert (w3["median"], w3["runs"], w3["lost"]) == (600.0, [500.0, 700.0], [0, 2])
    assert w3["exactly_once"] is False
    assert w3["after_first_job"]["median"] == 620.0
    kept = (tmp_path / "rounds" / "headgate_pg.jsonl").read_text().splitlines()
    assert kept == rounds


def agg(runs: list[float | None]) -> dict[str, object]:
    have = [r for r in runs if r is not None]
    return {"median": have[0] if have else None, "min": min(have, default=None),
            "max": max(have, default=None), "runs": runs}


def test_cpu_per_job_is_merged_part_by_part_and_a_missing_part_counts_as_unmeasured(
        tmp_path: Path) -> None:
    out = tmp_path / "headgate_pg.jsonl"
    meter = {"postmaster": 7, "window": "timed single-enqueue loop"}
    rounds = [
        line("W1", [900.0], cpu_us_per_job={"client": agg([200.0]), "server": agg([300.0]),
                                            "total": agg([500.0])}, cpu_meter=meter),
        line("W1", [1100.0], cpu_us_per_job={"client": agg([100.0]), "total": agg([100.0])},
             cpu_meter=meter),
        line("W1", [1000.0], cpu_us_per_job={"client": agg([150.0]), "server": agg([350.0]),
                                             "total": agg([400.0])}, cpu_meter=meter),
    ]
    out.write_text("\n".join(rounds) + "\n")
    subprocess.run([sys.executable, str(ROOT / "bench" / "merge_rounds.py"), str(out)],
                   check=True, timeout=60)

    (w1,) = map(json.loads, out.read_text().splitlines())
    cpu = w1["cpu_us_per_job"]
    assert cpu["client"] == {"median": 150.0, "min": 100.0, "max": 200.0,
                             "runs": [200.0, 100.0, 150.0]}
    assert cpu["server"] == {"median": 325.0, "min": 300.0, "max": 350.0,
                             "runs": [300.0, None, 350.0]}
    assert cpu["total"]["median"] == 400.0
    assert w1["cpu_meter"] == meter  # not an aggregate: the first round's


def limit(loop: str, jobs_s: float) -> str:
    return json.dumps({"bench": "limits", "store": "pg", "loop": loop, "n": 100, "batch": 1,
                       "runs": [jobs_s], "unit": "jobs/s", "median": jobs_s, "min": jobs_s,
                       "max": jobs_s, "setup": {"indexes": 12}})


def test_raw_limit_loops_run_once_a_round_are_merged_per_loop(tmp_path: Path) -> None:
    out = tmp_path / "limits_pg.jsonl"
    rounds = [limit("insert_commit", 2000.0), limit("claim_ack", 1000.0),
              limit("insert_commit", 2200.0), limit("claim_ack", 1100.0),
              limit("insert_commit", 2100.0), limit("claim_ack", 900.0)]
    out.write_text("\n".join(rounds) + "\n")
    subprocess.run([sys.executable, str(ROOT / "bench" / "merge_rounds.py"), str(out)],
                   check=True, timeout=60)

    merged = {r["loop"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(merged) == {"insert_commit", "claim_ack"}
    insert = merged["insert_commit"]
    assert (insert["median"], insert["min"], insert["max"]) == (2100.0, 2000.0, 2200.0)
    assert insert["runs"] == [2000.0, 2200.0, 2100.0] and insert["rounds"] == 3
    assert insert["store"] == "pg" and insert["setup"] == {"indexes": 12}
    assert merged["claim_ack"]["median"] == 1000.0
