"""Merge a row's per-round JSON lines into the one line per workload the tables read.

    .venv/bin/python bench/merge_rounds.py OUT/<label>.jsonl ...   (bench/compare.sh)

bench/compare.sh runs every headgate and peer row once per round (`--runs 1`) and
repeats the rounds, so each row's runs are spread over the same stretch of time as every
other row's: this machine's speed drifts by the hour, and a ratio between two rows run
minutes apart measured the drift as much as the rows. Each file then holds one line per
round and workload; this rewrites it with one line per workload whose figures are
recomputed over all the rounds (median, min, max, runs, as the harness's `agg` writes
them), keeping the rounds' lines in `rounds/<label>.jsonl` beside it.

Merging a line: a dict with a `runs` list is re-aggregated (the line itself, p50_ms,
after_first_job, …); a list (lost, duplicates, timed_out) is concatenated; exactly_once
holds only if it held in every round; anything else is the first round's.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

AGG_KEYS = ("median", "min", "max", "runs")


def aggregate(values: list[float | None]) -> dict[str, Any]:
    have = [v for v in values if v is not None]
    if not have:
        return {"median": None, "min": None, "max": None, "runs": values}
    return {"median": round(statistics.median(have), 2), "min": round(min(have), 2),
            "max": round(max(have), 2), "runs": values}


def merge(lines: list[dict[str, Any]]) -> dict[str, Any]:
    first = lines[0]
    out: dict[str, Any] = {}
    for key, val in first.items():
        if isinstance(val, dict) and isinstance(val.get("runs"), list):
            out[key] = aggregate([r for line in lines for r in line[key]["runs"]])
        elif isinstance(val, list):
            out[key] = [x for line in lines for x in line.get(key, [])]
        elif key == "exactly_once":
            out[key] = all(line.get(key, False) for line in lines)
        elif key not in AGG_KEYS:
            out[key] = val
    if isinstance(first.get("runs"), list):
        out.update(aggregate([r for line in lines for r in line["runs"]]))
    if "runs_requested" in first:
        out["runs_requested"] = sum(line["runs_requested"] for line in lines)
    out["rounds"] = len(lines)
    return out


def merge_file(path: Path) -> None:
    raw = [line for line in path.read_text().splitlines() if line.startswith("{")]
    if not raw:
        return
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    others: list[str] = []
    for line in raw:
        rec = json.loads(line)
        if "peer" in rec and "workload" in rec:
            groups.setdefault((rec["peer"], rec["workload"]), []).append(rec)
        elif line not in others:  # e.g. a skip notice, written once per round
            others.append(line)
    keep = path.parent / "rounds"
    keep.mkdir(exist_ok=True)
    (keep / path.name).write_text("\n".join(raw) + "\n")
    merged = [json.dumps(merge(lines)) for lines in groups.values()]
    path.write_text("\n".join([*others, *merged]) + "\n")


def main() -> None:
    for name in sys.argv[1:]:
        path = Path(name)
        if path.exists():
            merge_file(path)


if __name__ == "__main__":
    main()
