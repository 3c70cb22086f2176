"""The HTTP enqueue's write section under concurrent request threads, on SQLite.

    .venv/bin/python bench/keyed.py [--threads 8] [--seconds 4] [--runs 3] [--work-us 150]

Each thread does what a `POST /api/v1/jobs` request thread does around its write: some
Python before and after it (`--work-us` of pure-Python work on each side, standing in for
the request's parsing, validation and answer), and in between the keyed enqueue (the
key's record, the job, the stored answer) in one SQLite write transaction. Two ways to
run that write, alternated run by run:

  direct      `Store.enqueue_keyed`, one transaction per request (what serve does)
  combining   a model of a combining writer: a request queues its write; whichever
              request takes the write lock runs every queued write in one transaction,
              a savepoint each, and the others find theirs done when they get the lock

and, for the bound, `direct` from one thread (no contention: what the process's one
core allows for that much Python per request). One JSON line per mode: requests/s median
and min–max over the runs (and, for combining, the mean number of writes per
transaction). This measures a design before building it; `combining` is not how the
store writes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from headgate.adapters.shared import idempotency  # noqa: E402
from headgate.adapters.sqlite.connection import Database  # noqa: E402
from headgate.adapters.sqlite.store import SqliteStore  # noqa: E402
from headgate.core import Envelope  # noqa: E402


def spin(loops: int) -> int:
    x = 0
    for _ in range(loops):
        x += 1
    return x


def loops_per_us() -> float:
    spin(100_000)
    start = time.perf_counter()
    spin(1_000_000)
    return 1_000_000 / ((time.perf_counter() - start) * 1e6)


class _Write:
    __slots__ = ("action", "done", "error", "result")

    def __init__(self, action: Callable[[Any, int], Any]) -> None:
        self.action = action
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class CombiningWriter:
    """Flat combining over SQLite's one writer (the model measured here)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.lock = threading.Lock()
        self.queued_lock = threading.Lock()
        self.queued: list[_Write] = []
        self.transactions = 0
        self.writes = 0

    def run(self, action: Callable[[Any, int], Any]) -> Any:
        mine = _Write(action)
        with self.queued_lock:
            self.queued.append(mine)
        with self.lock:
            if not mine.done:
                with self.queued_lock:
                    batch, self.queued = self.queued, []
                self._write(batch)
        if mine.error is not None:
            raise mine.error
        return mine.result

    def _write(self, batch: list[_Write]) -> None:
        self.transactions += 1
        self.writes += len(batch)
        try:
            with self.db.write() as (conn, now):
                for w in batch:
                    conn.execute("SAVEPOINT w")
                    try:
                        w.result = w.action(conn, now)
                    except Exception as exc:  # noqa: BLE001 - that request's error
                        conn.execute("ROLLBACK TO w")
                        w.error = exc
                    conn.execute("RELEASE w")
        except Exception as exc:  # noqa: BLE001 - nothing committed: every request's
            for w in batch:
                w.error = exc
        for w in batch:
            w.done = True


def keyed_write(store: SqliteStore, scope: str, env: Envelope,
                answer: tuple[int, dict[str, str], bytes], conn: Any, now: int) -> Any:
    """enqueue_keyed's write, as one queued action of the combining writer."""
    record = idempotency.peek(conn, now, scope)
    if record is not None:
        return record
    ids = store.enqueue_many_in(conn, [env])
    idempotency.store_done(conn, now, scope, "h", idempotency.DAY_MS, *answer)
    return ids


def one_run(mode: str, threads: int, seconds: float, spin_loops: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hg-keyed-") as tmp:
        store = SqliteStore(f"{tmp}/keyed.db")
        writer = CombiningWriter(store.db)
        counts = [0] * threads
        stop = time.perf_counter() + seconds

        def request_thread(t: int) -> None:
            i = 0
            while time.perf_counter() < stop:
                spin(spin_loops)
                key = f"{t}-{i}-{uuid.uuid4().hex[:8]}"
                i += 1
                scope = "idem:" + key
                env = Envelope(kind="bench.http", payload=b'{"n": 1}', queue="http",
                               unique_key=scope.encode()).validated()
                answer = (201, {"Content-Type": "application/json"},
                          json.dumps({"id": env.id}).encode())
                if mode == "combining":
                    writer.run(partial(keyed_write, store, scope, env, answer))
                else:
                    store.enqueue_keyed(scope, "h", env, answer)
                spin(spin_loops)
                counts[t] += 1

        start = time.perf_counter()
        workers = [threading.Thread(target=request_thread, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - start
        done = sum(counts)
        jobs = sum(store.counts("http").values())
        store.close()
    if jobs != done:
        raise RuntimeError(f"{mode}: {done} requests answered, {jobs} jobs stored")
    group = writer.writes / writer.transactions if writer.transactions else 1.0
    return {"rps": done / elapsed, "group": group}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work-us", type=float, default=150.0,
                    help="pure-Python work before and after each write (µs each)")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.runs < 1 or args.seconds <= 0 or args.work_us < 0:
        ap.error("--threads and --runs must be >= 1, --seconds > 0, --work-us >= 0")
    spin_loops = round(args.work_us * loops_per_us())
    rows = {"direct[1 thread]": ("direct", 1), "direct": ("direct", args.threads),
            "combining": ("combining", args.threads)}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in rows}
    for _ in range(args.runs):
        for name, (mode, threads) in rows.items():
            results[name].append(one_run(mode, threads, args.seconds, spin_loops))
    for name, (mode, threads) in rows.items():
        rps = [r["rps"] for r in results[name]]
        line: dict[str, Any] = {
            "bench": "keyed", "mode": name, "threads": threads, "work_us": args.work_us,
            "unit": "requests/s", "runs": [round(x) for x in rps],
            "median": round(statistics.median(rps)), "min": round(min(rps)),
            "max": round(max(rps))}
        if mode == "combining":
            line["writes_per_transaction"] = round(
                statistics.median(r["group"] for r in results[name]), 2)
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
