"""Import-time benchmark: what `import headgate` costs a fresh interpreter.

A producer embeds headgate in a host application, so every process of that application
pays for `import headgate`, including the web server, scheduler and database driver
it would pull in. Each run starts a new interpreter with `-X importtime` and reads the
cumulative time of the top-level module from its report.

Metrics (one JSON line each: median and min–max milliseconds over `--runs` runs):
  import_headgate         `import headgate` (the producer's import)
  import_headgate_worker  `import headgate; headgate.Worker` (adds the worker runtime)
  interpreter_wall        wall time of `python -c "import headgate"`, interpreter included
  interpreter_bare        wall time of `python -c pass`, the floor under the line above
The first line also names which of flask, gunicorn, apscheduler and psycopg the
producer's import loaded (none is the goal).

Usage:
  .venv/bin/python bench/import_time.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("flask", "gunicorn", "apscheduler", "psycopg")
SNIPPETS = {
    "import_headgate": "import headgate",
    "import_headgate_worker": "import headgate; headgate.Worker",
}


def _env() -> dict[str, str]:
    # The checkout first, so the figures are for this tree even without an install.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def cumulative_ms(code: str) -> float:
    """The import time `code` spends in headgate's modules and what they import: the sum
    of the top-level headgate entries (a lazily loaded `headgate.worker` is one)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=_env(),
                          capture_output=True, text=True, check=True)
    total_us = 0
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        # "import time: self [us] | cumulative | name"; top level: the name unindented.
        if len(parts) != 3 or parts[2][:2] == "  ":
            continue
        name = parts[2].strip()
        if name == "headgate" or name.startswith("headgate."):
            total_us += int(parts[1])
    if not total_us:
        raise RuntimeError(f"no import time for headgate in:\n{proc.stderr[-2000:]}")
    return total_us / 1000


def wall_ms(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=_env(), check=True)
    return (time.perf_counter() - started) * 1000


def loaded_heavy() -> list[str]:
    code = ("import sys, json, headgate; "
            f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                         text=True, check=True).stdout
    return list(json.loads(out))


def summary(metric: str, samples: list[float], **extra: object) -> dict[str, object]:
    return {"metric": metric, "unit": "ms", "runs": len(samples),
            "median": round(statistics.median(samples), 2),
            "min": round(min(samples), 2), "max": round(max(samples), 2), **extra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    cumulative_ms("import headgate")  # warm the bytecode cache: no run pays compilation
    heavy = loaded_heavy()
    for i, (metric, code) in enumerate(SNIPPETS.items()):
        samples = [cumulative_ms(code) for _ in range(args.runs)]
        extra = {"python": sys.version.split()[0], "heavy_loaded": heavy} if i == 0 else {}
        print(json.dumps(summary(metric, samples, **extra)), flush=True)
    for metric, code in (("interpreter_wall", "import headgate"), ("interpreter_bare", "pass")):
        print(json.dumps(summary(metric, [wall_ms(code) for _ in range(args.runs)])),
              flush=True)


if __name__ == "__main__":
    main()
