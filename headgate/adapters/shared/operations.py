"""Bulk operations (POST /jobs/bulk and a forced queue delete).

Creating one is a single short transaction that records the request and a bounded
estimate; the work happens later, one bounded batch per transaction, so neither a
request nor a write lock ever spans an unbounded number of jobs. Progress lives in the
row, so any serve process on the database can pick up where another stopped.

Written in the SQL subset SQLite and PostgreSQL share; the few engine differences go
through `conn.dialect`.
"""

from __future__ import annotations

import json
from typing import Any

from headgate.core import STORED_STATES, InvalidTransition, NotFound
from headgate.core.envelope import check_int, check_text
from headgate.core.errors import InvalidInput
from headgate.core.ids import new_id
from headgate.core.records import Operation
from headgate.core.transitions import sources_of

from . import control
from .job_pages import MAX_BRANCHES, merged, occupied
from .queries import fill, load

# The operator event each bulk action applies; None = the row is deleted outright.
ACTIONS: dict[str, str | None] = {
    "retry": "operator_retry",
    "cancel": "operator_cancel",
    "delete": None,
}
DELETE_QUEUE = "delete_queue"
SELECTOR_KEYS = ("queue", "state", "kind", "partition_key", "older_than_ms")
# A dry run or an estimate never counts more rows than this (bounded inspection).
ESTIMATE_CAP = 100_000
STATUSES = ("queued", "running", "done", "failed")

OP_COLUMNS = (
    "id, action, selector, dry_run, status, affected, total_estimated, total_capped, "
    "error, created_at_ms, updated_at_ms, finished_at_ms"
)

Q = load(__name__)
INSERT_OP = Q["insert_op"]
SELECT_OP = fill(Q["select_op"], columns=OP_COLUMNS)
SELECT_ACTIVE = Q["select_active"]
ACTIVE_ID = Q["active_id"]
COUNT_STATES = Q["count_states"]
COUNT_SELECTED = Q["count_selected"]
NEXT_SELECTED = Q["next_selected"]
NEXT_SELECTED_IN = Q["next_selected_in"]
DELETE_JOBS = Q["delete_jobs"]
ADVANCE_OP = Q["advance_op"]
FAIL_OP = Q["fail_op"]
QUEUE_TOTAL = Q["queue_total"]
DROP_QUEUE = (Q["drop_queue_row"], Q["drop_queue_counts"], Q["drop_queue_partitions"],
              Q["drop_queue_limits"], Q["drop_queue_memory"])
QUEUE_EXISTS = Q["queue_exists"]
PENDING_OF_ACTION = Q["pending_of_action"]
STOP_QUEUE = Q["stop_queue"]


def eligible_states(action: str) -> list[str]:
    """States an action can apply to, from the transition table (delete: every state)."""
    event = ACTIONS.get(action)
    if event is None:
        return [s.value for s in STORED_STATES]
    return sorted(s.value for s in sources_of(event))


def validate_action(action: Any) -> str:
    if not isinstance(action, str):
        raise InvalidInput("action must be a string")
    if action == "archive":
        # No operator_archive row exists, and rows are not invented here.
        raise InvalidInput("operator_archive is not in the transition table")
    if action not in ACTIONS:
        raise InvalidInput(f"unknown action `{action}`")
    return action


def normalize_selector(selector: dict[str, Any], now: int) -> dict[str, Any]:
    """Checked copy of a selector; `older_than_ms` is pinned to an absolute cut-off now,
    so a long-running operation does not sweep in jobs that age into it later."""
    if not isinstance(selector, dict):
        raise InvalidInput("selector must be an object")
    out: dict[str, Any] = {}
    for key in ("queue", "kind", "partition_key"):
        value = selector.get(key)
        if value is not None:
            out[key] = check_text(f"selector.{key}", value, 0 if key == "partition_key" else 1)
    state = selector.get("state")
    if state is not None:
        if state not in {s.value for s in STORED_STATES}:
            raise InvalidInput(f"unknown state `{state}`")
        out["state"] = state
    older = selector.get("older_than_ms")
    if older is not None:
        out["older_than_ms"] = check_int("selector.older_than_ms", older, 0)
        out["enqueued_before_ms"] = now - older
    if not any(key in out for key in SELECTOR_KEYS):
        # An empty selector would mean "every job in the database": never by accident.
        raise InvalidInput(
            "selector must name at least one of queue, state, kind, partition_key, "
            "older_than_ms"
        )
    return out


def _where(selector: dict[str, Any], states: list[str]) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for column in ("queue", "kind", "partition_key"):
        if column in selector:
            clauses.append(f"{column} = ?")
            params.append(selector[column])
    if "state" in selector:
        if selector["state"] not in states:
            return "1 = 0", []
        clauses.append("state = ?")
        params.append(selector["state"])
    elif len(states) < len(STORED_STATES):
        clauses.append(f"state IN ({', '.join('?' * len(states))})")
        params += states
    if "enqueued_before_ms" in selector:
        clauses.append("enqueued_at_ms < ?")
        params.append(selector["enqueued_before_ms"])
    return (" AND ".join(clauses) or "1 = 1"), params


def estimate(conn: Any, selector: dict[str, Any], states: list[str]) -> tuple[int, bool]:
    """(count, capped). Exact and O(queues) from the maintained counters when the
    selector is only queue and/or state; otherwise a count capped at ESTIMATE_CAP."""
    if set(selector) <= {"queue", "state"}:
        wanted = [selector["state"]] if "state" in selector else states
        wanted = [s for s in wanted if s in states]
        if not wanted:
            return 0, False
        marks = ", ".join("?" * len(wanted))
        params: list[Any] = list(wanted)
        where = ""
        if "queue" in selector:
            where = " AND queue = ?"
            params.append(selector["queue"])
        sql = fill(COUNT_STATES, marks=marks, where=where)
        return int(conn.execute(sql, params).fetchone()[0]), False
    where, params = _where(selector, states)
    n = conn.execute(fill(COUNT_SELECTED, where=where), (*params, ESTIMATE_CAP + 1)
                     ).fetchone()[0]
    return (ESTIMATE_CAP, True) if n > ESTIMATE_CAP else (int(n), False)


def create(conn: Any, now: int, action: str, selector: dict[str, Any],
           dry_run: bool) -> Operation:
    action = validate_action(action)
    if not isinstance(dry_run, bool):
        raise InvalidInput("dry_run must be a boolean")
    sel = normalize_selector(selector, now)
    total, capped = estimate(conn, sel, eligible_states(action))
    return _insert(conn, now, action, sel, dry_run, total, capped)


def _insert(conn: Any, now: int, action: str, sel: dict[str, Any], dry_run: bool, total: int,
            capped: bool) -> Operation:
    op_id = new_id()
    # A dry run is complete when created: its answer is the estimate.
    status = "done" if dry_run else "queued"
    conn.execute(INSERT_OP, (
        op_id, action, json.dumps(sel, sort_keys=True), int(dry_run), status, total,
        int(capped), now, now, now if dry_run else None,
    ))
    found = get(conn, op_id)
    assert found is not None
    return found


def get(conn: Any, op_id: str) -> Operation | None:
    row = conn.execute(SELECT_OP, (op_id,)).fetchone()
    if row is None:
        return None
    selector = json.loads(row[2])
    selector.pop("enqueued_before_ms", None)
    return Operation(
        id=row[0], action=row[1], selector=selector, dry_run=bool(row[3]), status=row[4],
        affected=int(row[5]), total_estimated=None if row[6] is None else int(row[6]),
        total_capped=bool(row[7]), error=row[8], created_at_ms=row[9], updated_at_ms=row[10],
        finished_at_ms=row[11],
    )


def run_batch(conn: Any, now: int, limit: int) -> tuple[int, set[str], bool]:
    """Advance the oldest active operation by at most `limit` jobs.

    Returns (jobs affected, queues touched, whether an operation was found)."""
    row = conn.execute(
        SELECT_ACTIVE.format(skip_locked=conn.dialect.skip_locked)
    ).fetchone()
    if row is None:
        return 0, set(), False
    op_id, action, selector_json, cursor, status = row
    selector = json.loads(selector_json)
    states = eligible_states("delete" if action == DELETE_QUEUE else action)
    rows = _next_rows(conn, selector, states, cursor, limit)
    affected, queues = _apply(conn, now, action, rows)
    last = rows[-1][0] if rows else cursor
    finished = len(rows) < limit
    if finished and action == DELETE_QUEUE:
        finished = _finish_queue_delete(conn, selector["queue"])
        if not finished:
            last = ""  # jobs arrived behind the cursor (e.g. other writers): sweep again
    conn.execute(ADVANCE_OP, ("done" if finished else "running", affected, last, now,
                              now if finished else None, op_id))
    return affected, queues, True


def _next_rows(conn: Any, selector: dict[str, Any], states: list[str], cursor: str,
               limit: int) -> list[tuple]:
    """The next `limit` selected jobs after `cursor`, in id order.

    `jobs` has no index that starts with the state or with the queue alone, and a batch
    holds the write lock: each (queue, state) holding selected states (of the selected
    queue, if any) is walked over (queue, state, id) and the walks merged, so a rare
    state is found without a scan and a queue without a sort."""
    wanted = [selector["state"]] if "state" in selector else states
    pairs: list[tuple] | None = None
    if set(wanted) <= set(states):
        pairs = occupied(conn, wanted, selector.get("queue"))
    if pairs is None or len(pairs) > MAX_BRANCHES:
        where, params = _where(selector, states)
        return conn.execute(fill(NEXT_SELECTED, where=where),
                            (*params, cursor, limit)).fetchall()
    rest = {k: v for k, v in selector.items() if k != "state"}
    where, params = _where(rest, [s.value for s in STORED_STATES])
    sql = fill(NEXT_SELECTED_IN, where=where)
    return merged(conn, sql, pairs, (*params, cursor), limit, False)


def _apply(conn: Any, now: int, action: str, rows: list[tuple]) -> tuple[int, set[str]]:
    if not rows:
        return 0, set()
    queues = {r[1] for r in rows}
    if ACTIONS.get(action) is None:  # delete, delete_queue
        ids = [r[0] for r in rows]
        conn.execute(DELETE_JOBS.format(marks=", ".join("?" * len(ids))), ids)
        return len(ids), queues
    apply = control.operator_retry if action == "retry" else control.operator_cancel
    affected = 0
    for job_id, _queue in rows:
        try:
            apply(conn, now, job_id)
        except (InvalidTransition, NotFound):
            continue  # moved on since it was selected: not this operation's business
        affected += 1
    return affected, queues


def fail(conn: Any, now: int, op_id: str, error: str) -> None:
    conn.execute(FAIL_OP, (error[:1000], now, now, op_id))


def active_id(conn: Any) -> str | None:
    row = conn.execute(ACTIVE_ID).fetchone()
    return row[0] if row else None


# -- queue delete -------------------------------------------------------------------

def _queue_total(conn: Any, queue: str) -> int:
    return int(conn.execute(QUEUE_TOTAL, (queue,)).fetchone()[0])


def _drop_queue(conn: Any, queue: str) -> None:
    """Forget an empty queue and its settings; history buckets age out on their own."""
    for sql in DROP_QUEUE:
        conn.execute(sql, (queue,))


def _finish_queue_delete(conn: Any, queue: str) -> bool:
    conn.dialect.lock_queues(conn, [queue])  # as an enqueue does: none lands meanwhile
    if _queue_total(conn, queue) > 0:
        return False
    _drop_queue(conn, queue)
    return True


def delete_queue(conn: Any, now: int, queue: str, force: bool) -> str | None:
    """None when the queue was empty and is gone; an operation id when `force` must
    delete jobs first. A non-empty queue without `force` is refused (409)."""
    check_text("queue", queue)
    conn.dialect.lock_queues(conn, [queue])  # as an enqueue does: none lands meanwhile
    exists = conn.execute(QUEUE_EXISTS, (queue,)).fetchone()
    total = _queue_total(conn, queue)
    if exists is None and total == 0:
        raise NotFound("queue", queue)
    pending = conn.execute(PENDING_OF_ACTION, (DELETE_QUEUE,)).fetchall()
    for op_id, selector in pending:
        if json.loads(selector).get("queue") == queue:
            return op_id  # already being deleted: one operation per queue
    if total == 0:
        _drop_queue(conn, queue)
        return None
    if not force:
        raise InvalidTransition(
            f"queue {queue} is not empty ({total} jobs); delete its jobs first or pass "
            "force=true"
        )
    # Stop intake and admission while the jobs go: paused, and the 0 kill switch.
    control.ensure_queue(conn, now, queue)
    conn.execute(STOP_QUEUE, (queue,))
    return _insert(conn, now, DELETE_QUEUE, {"queue": queue}, False, total, False).id
