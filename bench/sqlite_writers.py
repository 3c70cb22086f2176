"""SQLite writers in several processes: how long each waits for the write lock.

    .venv/bin/python bench/sqlite_writers.py [--processes 3] [--seconds 6] [--rounds 3]
        [--hold-ms 1.0] [--out FILE]

Every process loops over small write transactions on one SQLite file (WAL,
synchronous=NORMAL, as headgate's): wait for the write lock, `BEGIN IMMEDIATE`, one
insert, `--hold-ms` of work inside the transaction (a sleep: the lock is what is
measured, not the CPU), `COMMIT`, then 0.2 ms outside. Two ways of waiting, taking
turns round by round (A B A B ...) so a noisy minute falls on both:

- `busy`: headgate's writer lock with no lock file (`WriterLock(None, ...)`): the
  process's own lock, then SQLite's busy handler between processes, which retries
  after sleeps of 1, 2, 5, ... 100 ms (how headgate waited before the lock file);
- `file`: headgate's writer lock as `Database` builds it, with its flock beside the
  database (headgate/adapters/sqlite/writer_lock.py).

Per mode, over its rounds: commits a second (all processes), the wait for the lock
(from asking to `BEGIN IMMEDIATE` returning) at p50, p99 and max in ms, and fairness
(the fewest commits of any process over the most), each as median and min–max; one
JSON document (stdout, or `--out`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headgate.adapters.sqlite.writer_lock import WriterLock  # noqa: E402

MODES = ("busy", "file")


def _writer(path: str, mode: str, seconds: float, hold_ms: float, out: Any) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    conn.execute("PRAGMA synchronous = NORMAL")
    lock = WriterLock(path if mode == "file" else None, timeout_s=5.0)
    waits: list[float] = []
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        asked = time.perf_counter()
        with lock:
            conn.execute("BEGIN IMMEDIATE")
            waits.append(time.perf_counter() - asked)
            conn.execute("INSERT INTO t (v) VALUES (?)", (n,))
            if hold_ms:
                time.sleep(hold_ms / 1000)
            conn.execute("COMMIT")
        n += 1
        time.sleep(0.0002)
    lock.close()
    conn.close()
    out.put((n, waits))


def one_round(mode: str, processes: int, seconds: float, hold_ms: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="hg-writers-") as tmp:
        path = os.path.join(tmp, "w.db")
        setup = sqlite3.connect(path)
        setup.execute("PRAGMA journal_mode = WAL")
        setup.execute("CREATE TABLE t (v INTEGER)")
        setup.commit()
        setup.close()
        out: Any = mp.Queue()
        procs = [mp.Process(target=_writer, args=(path, mode, seconds, hold_ms, out))
                 for _ in range(processes)]
        for p in procs:
            p.start()
        results = [out.get() for _ in procs]
        for p in procs:
            p.join()
    counts = [n for n, _ in results]
    waits = sorted(w for _, ws in results for w in ws)
    return {
        "commits_per_s": sum(counts) / seconds,
        "wait_p50_ms": waits[len(waits) // 2] * 1000,
        "wait_p99_ms": waits[int(len(waits) * 0.99)] * 1000,
        "wait_max_ms": waits[-1] * 1000,
        "fairness": min(counts) / max(counts),
    }


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0, help="per round and mode")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hold-ms", type=float, default=1.0,
                    help="time inside each transaction (default 1 ms)")
    ap.add_argument("--out", help="write the JSON here instead of stdout")
    args = ap.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            result = one_round(mode, args.processes, args.seconds, args.hold_ms)
            runs[mode].append(result)
            print(f"round {r + 1} {mode}: " + json.dumps(
                {k: round(v, 3) for k, v in result.items()}), file=sys.stderr, flush=True)
    doc = {
        "what": "SQLite write-lock waits across processes: SQLite's busy handler (busy) "
                "against headgate's lock file (file)",
        "processes": args.processes, "seconds": args.seconds, "rounds": args.rounds,
        "hold_ms": args.hold_ms,
        "modes": {m: {k: summary([run[k] for run in runs[m]]) for k in runs[m][0]}
                  for m in MODES},
        "runs": runs,
        "versions": {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                     "cpus": os.cpu_count()},
    }
    text = json.dumps(doc, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
