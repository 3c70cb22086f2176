"""Adaptive rate classes in the store: the AIMD rules of core/adaptive.py applied to a
class's row inside the caller's transaction, in the SQL both engines share.

Both read the class row locked (PostgreSQL: FOR UPDATE; SQLite's writes are serial): of
two hosts reporting throttles in the same window one cuts the limit and the other finds
`last_decrease_ms` already in this window and only counts; of two successes one raises
it; and the bucket's tokens, settled before the limit changes, are the ones admission
left, never a copy from before an admission that took some. Both write
`limit_per_window` and `burst`, the columns admission reads, so admission itself knows
nothing of adaptation. The refill instant they write never goes back: `now` was read
before the lock was granted, and an admission that held it may have refilled later.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from headgate.core import Explanation
from headgate.core.adaptive import (
    Adaptive,
    may_decrease,
    may_increase,
    scaled_burst,
    summary,
)
from headgate.core.records import AdaptiveState, RateClassChange
from headgate.core.schema_constants import HISTORY_BUCKET_MS

from .conn import Connection
from .queries import fill, load

COLUMNS = ("limit_per_window, window_ms, burst, paused, tokens, refilled_at_ms, adaptive_min, "
           "adaptive_max, adaptive_factor, adaptive_step, base_limit, base_burst, "
           "last_decrease_ms, last_increase_ms, throttles")
# The columns an operator's PUT sets beside the bucket (configure), in this order.
SETTINGS = ("adaptive_min", "adaptive_max", "adaptive_factor", "adaptive_step", "base_limit",
            "base_burst", "last_decrease_ms", "last_increase_ms")

Q = load(__name__)
SELECT_CLASS = fill(Q["select_class"], columns=COLUMNS)
RISING = Q["rising"]
RAISE = Q["raise"]
CUT = Q["cut"]
COUNT_THROTTLE = Q["count_throttle"]
INSERT_HISTORY = Q["insert_history"]
NEWEST_HISTORY = Q["newest_history"]
MOVE_INCREASE = Q["move_increase"]
HISTORY_SINCE = Q["history_since"]
LAST_CUT = Q["last_cut"]
ADAPTIVE_NAMES = Q["adaptive_names"]
JOB_RATE_CLASS = Q["job_rate_class"]


def _tokens_now(row: tuple[Any, ...], now: int) -> float:
    """The bucket's tokens at `now` under the limit it had (admission.RateBucket's rule),
    settled before the limit changes so the change does not re-rate time gone by."""
    limit, window_ms, burst, _paused, tokens, refilled_at = row[:6]
    elapsed = max(0, now - refilled_at)
    return min(float(burst), tokens + elapsed * limit / window_ms)


def spec_of(row: tuple[Any, ...]) -> Adaptive | None:
    """The Adaptive of a SELECT_CLASS row (None: not adaptive)."""
    if row[6] is None:
        return None
    return Adaptive(int(row[6]), int(row[7]), float(row[8]), int(row[9]))


def record(conn: Connection, now: int, name: str, limit: int, window_ms: int, change: str,
           throttles: int = 0) -> None:
    """Append a change to the class's history; an increase within a minute of the
    previous increase moves that row forward instead (a climb is a line, not a row
    per window)."""
    if change == "increase":
        newest = conn.execute(NEWEST_HISTORY, (name,)).fetchone()
        if newest is not None and newest[2] == "increase" \
                and newest[1] > now - HISTORY_BUCKET_MS:
            conn.execute(MOVE_INCREASE, (now, limit, newest[0]))
            return
    conn.execute(INSERT_HISTORY, (name, now, limit, window_ms, change, throttles))


def throttled(conn: Connection, now: int, name: str) -> int | None:
    """A handler's throttle of a job in class `name`: on an adaptive class, the limit
    is cut by its factor (down to its min) unless it was cut within the window already,
    and the bucket is emptied so the lower rate starts now. Returns the class's window
    (the default delay of the throttled job), None when there is no such class."""
    row = conn.execute(SELECT_CLASS.format(for_update=conn.dialect.for_update),  # type: ignore[attr-defined]
                       (name,)).fetchone()
    if row is None:
        return None
    window_ms = int(row[1])
    spec = spec_of(row)
    if spec is None:
        return window_ms
    limit, last_decrease, throttles = int(row[0]), row[12], int(row[14]) + 1
    if not may_decrease(now, last_decrease, window_ms):
        conn.execute(COUNT_THROTTLE, (name,))
        return window_ms
    cut = spec.decreased(limit)
    burst = scaled_burst(int(row[11]), int(row[10]), cut)
    tokens = min(_tokens_now(row, now), 0.0)
    conn.execute(CUT, (cut, burst, tokens, max(now, int(row[5])), now, name))
    record(conn, now, name, cut, window_ms, "decrease", throttles)
    return window_ms


def succeeded(conn: Connection, now: int, names: Iterable[str]) -> None:
    """Jobs of the classes `names` succeeded: each adaptive one below its max that was
    neither raised nor cut within its window rises by its step."""
    wanted = sorted({n for n in names if n})
    if not wanted:
        return
    sql = RISING.format(marks=",".join("?" * len(wanted)),
                        name_order=conn.dialect.binary_order("name"),  # type: ignore[attr-defined]
                        for_update=conn.dialect.for_update)  # type: ignore[attr-defined]
    for row in conn.execute(sql, (*wanted, now, now)).fetchall():
        (name, limit, window_ms, burst, paused, tokens, refilled_at, top, step, base_limit,
         base_burst, last_increase) = row
        if not may_increase(now, last_increase, None, window_ms):
            continue
        raised = min(int(top), int(limit) + int(step))
        new_burst = scaled_burst(int(base_burst), int(base_limit), raised)
        settled = _tokens_now((limit, window_ms, burst, paused, tokens, refilled_at), now)
        cur = conn.execute(RAISE, (raised, new_burst, min(settled, float(new_burst)),
                                   max(now, int(refilled_at)), now, name, limit,
                                   -1 if last_increase is None else last_increase))
        if cur.rowcount:
            record(conn, now, name, raised, int(window_ms), "increase")


def configure(conn: Connection, now: int, name: str, limit: int, window_ms: int, burst: int,
              adaptive: Adaptive | None, old: tuple[Any, ...] | None
              ) -> tuple[int, int, dict[str, Any]]:
    """What an operator's PUT writes: (limit, burst, the adaptive columns). An adaptive
    class PUT again with the same limit, window and burst keeps what it learned
    (clamped to the new bounds); any other PUT starts it over from `limit`."""
    if adaptive is None:
        return limit, burst, dict.fromkeys(SETTINGS)
    adaptive.check_limit(limit)
    kept = (old is not None and old[6] is not None and int(old[10]) == limit
            and int(old[1]) == window_ms and int(old[11]) == burst)
    current = min(adaptive.max, max(adaptive.min, int(old[0]))) if kept and old else limit
    columns: dict[str, Any] = {
        "adaptive_min": adaptive.min, "adaptive_max": adaptive.max,
        "adaptive_factor": adaptive.decrease_factor, "adaptive_step": adaptive.increase_step,
        "base_limit": limit, "base_burst": burst,
        "last_decrease_ms": old[12] if kept and old else None,
        "last_increase_ms": old[13] if kept and old else None,
    }
    if not kept or old is None or int(old[0]) != current:
        record(conn, now, name, current, window_ms, "set")
    return current, scaled_burst(burst, limit, current), columns


def state(row: tuple[Any, ...], name: str, conn: Connection) -> AdaptiveState | None:
    """Where a class's adaptation stands (None: not adaptive)."""
    spec = spec_of(row)
    if spec is None:
        return None
    cut = conn.execute(LAST_CUT, (name,)).fetchone()
    return AdaptiveState(
        min=spec.min, max=spec.max, decrease_factor=spec.decrease_factor,
        increase_step=spec.increase_step, configured_limit=int(row[10]),
        configured_burst=int(row[11]), last_decrease_ms=row[12], last_increase_ms=row[13],
        throttles_since_decrease=int(row[14]),
        summary=summary(name, int(row[1]), int(row[0]),
                        None if cut is None else (int(cut[0]), int(cut[1]), int(cut[2]))),
    )


def history(conn: Connection, name: str, since_ms: int, limit: int) -> list[RateClassChange]:
    """The class's changes from `since_ms` on, oldest first (at most the newest `limit`)."""
    rows = conn.execute(HISTORY_SINCE, (name, since_ms, limit)).fetchall()
    return [RateClassChange(int(at), int(lim), int(win), change, int(n))
            for at, lim, win, change, n in reversed(rows)]


def adaptive_names(conn: Connection) -> set[str]:
    return {row[0] for row in conn.execute(ADAPTIVE_NAMES)}


def job_class_summary(conn: Connection, job_id: str) -> dict[str, Any] | None:
    """For explain: the adaptive block of the job's rate class, with its name and
    current limit (None: the job has no adaptive class)."""
    found = conn.execute(JOB_RATE_CLASS, (job_id,)).fetchone()
    if found is None or not found[0]:
        return None
    row = conn.execute(SELECT_CLASS.format(for_update=""), (found[0],)).fetchone()
    if row is None or row[6] is None:
        return None
    adaptive = state(row, found[0], conn)
    return {"rate_class": found[0], "limit_per_window": int(row[0]),
            "window_ms": int(row[1]), **(asdict(adaptive) if adaptive else {})}


def annotate(conn: Connection, explanation: Explanation, job_id: str) -> None:
    """Explain's word on an adaptive class: `detail.adaptive` names the job's class,
    its limit now and its last cut (`summary`: "rate class smtp adapted down to 12/s
    after 3 throttles at 12:01 UTC")."""
    found = job_class_summary(conn, job_id)
    if found is not None:
        explanation.detail = {**(explanation.detail or {}), "adaptive": found}
