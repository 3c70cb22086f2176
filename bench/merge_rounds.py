"""Merge a row's per-round JSON lines into the one line per workload the tables read.

    .venv/bin/python bench/merge_rounds.py OUT/<label>.jsonl ...   (bench/compare.sh)

bench/compare.sh runs every headgate and peer row, and the raw loops of
bench/limits.py, once per round (`--runs 1`) and repeats the rounds, so each row's runs
are spread over the same stretch of time as every other row's: this machine's speed
drifts by the hour, and a ratio between two rows run minutes apart measured the drift as
much as the rows. Each file then holds one line per round and workload (or raw loop);
this rewrites it with one line per workload whose figures are recomputed over all the
rounds (median, min, max, runs, as the harness's `agg` writes them), keeping the
rounds' lines in `rounds/<label>.jsonl` beside it.

Merging a line: a dict with a `runs` list is re-aggregated (the line itself, p50_ms,
after_first_job, …), and so is each member of a dict of such (cpu_us_per_job's client,
worker, server, total; a part a round lacks counts as its runs unmeasured); a list (lost,
duplicates, timed_out) is concatenated; exactly_once holds only if it held in every
round; anything else is the first round's.
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


def is_agg(val: Any) -> bool:
    return isinstance(val, dict) and isinstance(val.get("runs"), list)


def merge_parts(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """A dict of aggregates per round (e.g. CPU per job by part) merged part by part."""
    parts = list(dict.fromkeys(k for g in groups for k in g))
    out: dict[str, Any] = {}
    for part in parts:
        runs: list[float | None] = []
        for g in groups:
            width = max((len(v["runs"]) for v in g.values()), default=0)
            runs += g[part]["runs"] if part in g else [None] * width
        out[part] = aggregate(runs)
    return out


def merge(lines: list[dict[str, Any]]) -> dict[str, Any]:
    first = lines[0]
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for line in lines for k in line):
        val = next(line[key] for line in lines if key in line)
        if is_agg(val):
            out[key] = aggregate([r for line in lines for r in line.get(key, {}).get("runs", [])])
        elif isinstance(val, dict) and val and all(is_agg(v) for v in val.values()):
            out[key] = merge_parts([line.get(key) or {} for line in lines])
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


def row_key(rec: dict[str, Any]) -> tuple[str, ...] | None:
    """What a round's line measures: a harness row's workload, or a raw loop of
    bench/limits.py on one store; None for a line that is not a measurement."""
    if "peer" in rec and "workload" in rec:
        return ("peer", rec["peer"], rec["workload"])
    if rec.get("bench") == "limits" and "loop" in rec and is_agg(rec):
        return ("limits", rec.get("store", ""), rec["loop"])
    return None


def merge_file(path: Path) -> None:
    raw = [line for line in path.read_text().splitlines() if line.startswith("{")]
    if not raw:
        return
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    others: list[str] = []
    for line in raw:
        rec = json.loads(line)
        key = row_key(rec)
        if key is not None:
            groups.setdefault(key, []).append(rec)
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
