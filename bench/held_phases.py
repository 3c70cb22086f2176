"""The phases of a held-snapshot run (clean, held, released), shared by
held_snapshot.py (headgate) and held_snapshot_peers.py (the PostgreSQL peers, in the
peer harness's venv): the snapshot holder, the per-second sampler, the per-phase
summaries. It imports nothing of headgate, so both sides measure with the same code.
Not a benchmark itself."""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PHASES = ("clean", "held", "released")
FIGURES = ("completed", "produced", "backlog", "dead_tuples", "live_tuples", "wal_bytes",
           "oldest_transaction_s", "xmin_age")

# What headgate's PostgreSQL Store.transaction_horizon asks, so a peer's figures read alike:
# the oldest open transaction of another client session on this database (ms) and the
# age of the oldest snapshot.
PG_HORIZON = """
SELECT (extract(epoch FROM clock_timestamp() - min(xact_start)) * 1000)::bigint,
       max(age(backend_xmin))
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend' AND state <> 'idle' AND xact_start IS NOT NULL
"""


def commit() -> str | None:
    """The checkout's commit, for the record (None outside a git checkout)."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                          cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


class Snapshot:
    """A transaction on its own connection that read `table` and stays idle in it:
    REPEATABLE READ on PostgreSQL, a read transaction on SQLite."""

    def __init__(self, kind: str, url: str, path: str | None, table: str = "jobs") -> None:
        self.kind = kind
        self.conn: Any
        if kind == "pg":
            import psycopg

            self.conn = psycopg.connect(url)
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        else:
            assert path is not None
            self.conn = sqlite3.connect(path, isolation_level=None)
            self.conn.execute("BEGIN")
        self.rows = self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]

    def release(self) -> None:
        if self.kind == "pg":
            self.conn.rollback()
        else:
            self.conn.execute("COMMIT")
        self.conn.close()


def pg_tuples(conn: Any, table: str) -> dict[str, Any]:
    """Dead and live tuples of `table` (pg_stat_user_tables, which the server refreshes
    about once a second)."""
    row = conn.execute("SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables "
                       "WHERE relname = %s", (table,)).fetchone()
    return {"dead_tuples": row[0] if row else None, "live_tuples": row[1] if row else None}


def pg_horizon(conn: Any) -> dict[str, Any]:
    age_ms, xmin_age = conn.execute(PG_HORIZON).fetchone()
    return {"oldest_transaction_s": None if age_ms is None else int(age_ms) / 1000,
            "xmin_age": None if xmin_age is None else int(xmin_age)}


def records(path: Path, size: int) -> int:
    """Completions so far: fixed-width records the handlers appended to `path`."""
    return path.stat().st_size // size if path.exists() else 0


@dataclass
class PhaseRun:
    samples: list[dict[str, Any]] = field(default_factory=list)
    held_rows: int | None = None


def run_phases(seconds: tuple[int, int, int], open_snapshot: Callable[[], Snapshot],
               completed: Callable[[], int], produced: Callable[[], int],
               gauges: Callable[[], dict[str, Any]], check: Callable[[], None]) -> PhaseRun:
    """One sample a second from now on, through the three phases of `seconds` (clean,
    hold, released): the snapshot opens as the held phase's first second begins and ends
    as the released phase's does. `check` raises to end the run early (a dead worker);
    the snapshot is released on the way out."""
    clean, hold, released = seconds
    run = PhaseRun()
    snapshot: Snapshot | None = None
    try:
        t0 = time.monotonic()
        last_done = last_produced = 0
        bounds = [(PHASES[0], clean), (PHASES[1], clean + hold),
                  (PHASES[2], clean + hold + released)]
        phase_start = 0
        for second in range(1, int(bounds[-1][1]) + 1):
            time.sleep(max(0.0, t0 + second - time.monotonic()))
            phase = next(name for name, end in bounds if second <= end)
            if phase == "held" and snapshot is None:
                snapshot = open_snapshot()
                run.held_rows = snapshot.rows
                phase_start = second - 1
                log(f"held snapshot opened at {second - 1} s ({run.held_rows} rows seen)")
            if phase == "released" and snapshot is not None:
                snapshot.release()
                snapshot = None
                phase_start = second - 1
                log(f"snapshot released at {second - 1} s")
            done = completed()
            made = produced()
            sample = {"t": second, "phase": phase, "t_phase": second - phase_start,
                      "completed": done - last_done, "produced": made - last_produced,
                      "backlog": made - done, **gauges()}
            last_done, last_produced = done, made
            run.samples.append(sample)
            check()
            if second % 10 == 0:
                log(json.dumps(sample))
    finally:
        if snapshot is not None:
            snapshot.release()
    return run


def spread(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(samples: list[dict[str, Any]], rate: float) -> dict[str, Any]:
    """Per phase the median and min–max of each figure the samples have, and the seconds
    after the release until the backlog fell to one second of production."""
    phases: dict[str, Any] = {}
    for phase in PHASES:
        rows = [s for s in samples if s["phase"] == phase]
        phases[phase] = {"seconds": len(rows)}
        for name in FIGURES:
            values = [s[name] for s in rows if s.get(name) is not None]
            if values:
                phases[phase][name] = spread(values)
    cleared = next((s["t_phase"] for s in samples
                    if s["phase"] == "released" and s["backlog"] <= rate), None)
    return {"phases": phases, "backlog_cleared_after_s": cleared}


def run_in_tmp(prefix: str, label: str, run: Callable[[Path], dict[str, Any]], *,
               keep: bool, out: str | None) -> None:
    """`run(tmp)` in a fresh temporary directory (removed afterwards unless `keep`), its
    JSON written to `out` or stdout."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    log(f"{label}: tmp {tmp}")
    try:
        result = run(tmp)
    finally:
        if keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(result, indent=1)
    if out:
        Path(out).write_text(text + "\n")
    else:
        print(text)
