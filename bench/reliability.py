"""The figures of docs/RELIABILITY.md, from a run of the fault-injection suite.

    .venv/bin/python bench/reliability.py --write docs/RELIABILITY.md

runs `scripts/test.sh tests/faults` (which starts a throw-away PostgreSQL cluster, so
both backends run) with `HG_RELIABILITY_OUT` pointing at a JSON-lines file that each
scenario appends its figures to, then prints the table (and, with `--write`, replaces
the table between the `figures` markers of that document). `--soak-n N` sets the soak
size on both backends (default: the CI size, 10,000); `--from FILE` renders an
existing JSON-lines file without running.
The exit code is the test run's, so figures from a failing run are never mistaken
for a pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- figures:begin -->"
END = "<!-- figures:end -->"
COLUMNS = [
    ("scenario", "scenario"),
    ("backend", "backend"),
    ("faults", "faults injected"),
    ("jobs", "jobs"),
    ("runs", "handler runs"),
    ("lost", "lost"),
    ("duplicate_completions", "completed twice"),
    ("reruns", "re-runs (at-least-once)"),
    ("recover_s", "time to recover (s)"),
    ("notes", "notes"),
]
NOTE_KEYS = {
    "orphaned": "{} in flight at the kill",
    "duty_handover_s": "duties handed over in {} s",
    "drain_after_kill_s": "all done {} s after the kill",
    "outage_s": "outage {} s",
    "answered_503_s": "503 after {} s",
    "answered_again_s": "next 503 after {} s",
    "answers_503": "{} answers 503 (Retry-After)",
    "replayed": "{} retries replayed",
    "slowest_answer_s": "slowest answer {} s",
    "quarantined": "{} quarantined (in flight at 3 kills)",
    "reruns_by_live_workers": "{} re-runs by live workers (lease lapsed)",
    "wall_s": "{} s wall",
    "jobs_per_s": "{} jobs/s",
}


def run_suite(out: Path, soak_n: int | None, extra: list[str]) -> int:
    env = dict(os.environ, HG_RELIABILITY_OUT=str(out))
    if soak_n:
        env["HG_SOAK_N"] = str(soak_n)
    cmd = [str(ROOT / "scripts" / "test.sh"), "tests/faults", *extra]
    print("running:", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode


def load(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    order = {"sqlite": 0, "pg": 1}
    return sorted(rows, key=lambda r: (r["scenario"].startswith("soak"), r["scenario"],
                                       order.get(r["backend"], 9)))


def cell(row: dict[str, Any], key: str) -> str:
    if key == "notes":
        # Counts of nothing are left out; a measured 0.0 s is a figure.
        notes = [fmt.format(row[k]) for k, fmt in NOTE_KEYS.items()
                 if row.get(k) is not None and not (row[k] == 0 and isinstance(row[k], int))]
        if "terminal" in row and row["scenario"].startswith("soak"):
            notes.append(", ".join(f"{n} {s}" for s, n in sorted(row["terminal"].items())))
        return "; ".join(notes)
    value = row.get(key)
    if value is None:
        return "—"
    if key == "backend":
        return {"pg": "PostgreSQL", "sqlite": "SQLite"}.get(value, value)
    if isinstance(value, int) and value >= 10_000:
        return f"{value:,}"
    return str(value)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |",
             "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(row, key) for key, _ in COLUMNS) + " |")
    totals = {k: sum(int(r.get(k) or 0) for r in rows)
              for k in ("faults", "jobs", "runs", "lost", "duplicate_completions", "reruns")}
    lines.append(f"| **all scenarios** | both | {totals['faults']:,} | {totals['jobs']:,} | "
                 f"{totals['runs']:,} | {totals['lost']} | "
                 f"{totals['duplicate_completions']} | {totals['reruns']:,} | | |")
    return "\n".join(lines)


def provenance(exit_code: int | None, elapsed_s: float | None) -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    parts = [f"commit {commit}", time.strftime("%Y-%m-%d", time.gmtime()),
             f"{os.cpu_count()} CPUs", f"Python {platform.python_version()}"]
    if elapsed_s is not None:
        parts.append(f"suite {elapsed_s:.0f} s")
    if exit_code is not None:
        parts.append("all tests passed" if exit_code == 0 else f"TESTS FAILED ({exit_code})")
    return "Run: " + ", ".join(parts) + "."


def write(doc: Path, text: str) -> None:
    body = doc.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(body):
        raise SystemExit(f"{doc}: no {BEGIN} … {END} markers")
    doc.write_text(pattern.sub(lambda _: f"{BEGIN}\n{text}\n{END}", body))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="document whose figures table to replace")
    parser.add_argument("--soak-n", type=int, default=None, help="soak size (both backends)")
    parser.add_argument("--from", dest="source", type=Path, help="render this JSON-lines file")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    args = parser.parse_args()

    code: int | None = None
    elapsed: float | None = None
    if args.source:
        source = args.source
    else:
        source = Path(tempfile.mkstemp(prefix="reliability-", suffix=".jsonl")[1])
        started = time.monotonic()
        code = run_suite(source, args.soak_n, args.pytest_args)
        elapsed = time.monotonic() - started
    rows = load(source)
    for row in rows:
        print(json.dumps(row, sort_keys=True))
    text = table(rows) + "\n\n" + provenance(code, elapsed)
    print(text)
    if args.write:
        write(args.write, text)
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
