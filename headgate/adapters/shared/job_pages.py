"""Job pages: filters, keyset cursors, newest first, flat as the table grows.

A page is ``ORDER BY id DESC LIMIT n`` over an index that starts with the filter's
equalities. `jobs` keeps few indexes (each costs every write), so a filter with no index
of its own can be split into branches that have one, each branch paged the same way and
the pages merged: a state alone pages each queue holding jobs in that state over
(queue, state, id); a queue without a state pages each of its occupied states over the
same index; a kind prefix on SQLite pages each matching kind over (kind, id).
Text ids sort the same in Python as in both databases' keyset comparison (code point
order), so the merge is exact.

A filter with more than its index answers (a partition key, a priority, tags or a time
range, alone, with a state, or within a queue or a kind) walks that index newest first
and tests each job, so a rare match walked all of it (an unused partition key among 1M
jobs: ~5 s on SQLite, and past the statement timeout on a large PostgreSQL table). Such
a page looks at SCAN_LIMIT jobs at most along its index (each of a queue's states at
most, when it branches), as a payload search does, and answers what it found with a
cursor that goes on from where it stopped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

from headgate.core import STORED_STATES, JobFilter, JobPage
from headgate.core.cursors import decode_cursor, encode_cursor
from headgate.core.errors import InvalidInput
from headgate.core.job_search import payload_matches

from .conn import Connection
from .queries import fill, load
from .rows import JOB_COLUMNS, JOB_COLUMNS_WITH_PAYLOAD, row_to_job

MAX_PAGE = 200
# Each tags_all value is one EXISTS term: thousands of them exceed SQLite's expression
# depth (an error, not an answer). A job holds at most 32 tags anyway.
MAX_TAG_FILTERS = 100
# Past this many branches one plain query is cheaper than the merge.
MAX_BRANCHES = 64
STORED_STATE_NAMES = [s.value for s in STORED_STATES]
# A payload search decodes payloads in Python (the same answer on both engines, JSON
# paths included) and so reads them: per page it examines at most SCAN_LIMIT jobs or
# SCAN_BYTES of payload, newest first after the SQL filters, SCAN_CHUNK rows a query,
# then answers what it found with a cursor to continue from where it stopped.
SCAN_LIMIT = 10_000
SCAN_BYTES = 32 * 1024 * 1024
SCAN_CHUNK = 100

# SQLite pages a kind prefix alone by sorting every job of the matching kinds (0.6–1.6 s
# for `send_` among 1M jobs: its planner takes the kind range of jobs_kind_id, then sorts
# by id), so each kind is a branch. PostgreSQL's starts_with() plan walks the primary
# key instead, and its collation need not keep a prefix's kinds together, so it keeps
# the plain query.
Q = load(__name__)
FIRST_PREFIX_KIND = Q["first_prefix_kind"]
NEXT_PREFIX_KIND = Q["next_prefix_kind"]
OCCUPIED = Q["occupied"]
PAGE = Q["page"]
WALK_END = Q["walk_end"]


def occupied(conn: Connection, states: Sequence[str],
             queue: str | None = None) -> list[tuple[str, str]]:
    """The (queue, state) pairs holding any job in `states` (of `queue`, if given), from
    the maintained counters: the branches worth walking."""
    marks = ", ".join("?" * len(states))
    params = list(states)
    where = ""
    if queue is not None:
        where = " AND queue = ?"
        params.append(queue)
    return conn.execute(fill(OCCUPIED, marks=marks, where=where), params).fetchall()


def merged(conn: Connection, sql: str, branches: Iterable[tuple], params: Sequence[Any],
           n: int, newest_first: bool) -> list[tuple]:
    """`sql` once per branch (its first placeholders take the branch, then `params`,
    then the LIMIT `n`), and the first `n` rows of them all in id order (id first)."""
    rows: list[tuple] = []
    for branch in branches:
        rows += conn.execute(sql, (*branch, *params, n)).fetchall()
    return sorted(rows, key=itemgetter(0), reverse=newest_first)[:n]


def _prefix_kinds(conn: Connection, prefix: str) -> list[str] | None:
    """The kinds starting with `prefix` (SQLite's binary order keeps them together), one
    jobs_kind_id probe each; None when there are more than MAX_BRANCHES."""
    kinds: list[str] = []
    row = conn.execute(FIRST_PREFIX_KIND, (prefix, prefix)).fetchone()
    while row is not None:
        if len(kinds) == MAX_BRANCHES:
            return None
        kinds.append(row[0])
        row = conn.execute(NEXT_PREFIX_KIND, (row[0], prefix)).fetchone()
    return kinds


def _branches(conn: Connection, f: JobFilter) -> tuple[str, list[Any]] | None:
    """(column, values) to page one by one and merge, or None for one plain query.

    A branch that holds no match walks its whole range, so only filters every branch
    answers from its index alone branch: a state alone, or (SQLite) a kind prefix
    alone. A queue without a state or a kind branches whatever else it filters on: no
    index starts with the queue alone, and its branches together hold only the queue's
    jobs (with a kind, (kind, id) holds only the kind's). Anything else walks one index
    newest first and filters."""
    if f == JobFilter(state=f.state) and f.state is not None:
        values = [queue for queue, _ in occupied(conn, [f.state])]
        return None if len(values) > MAX_BRANCHES else ("queue", values)
    if f.queue is not None and f.state is None and f.kind is None:
        return "state", [state for _, state in occupied(conn, STORED_STATE_NAMES, f.queue)]
    if (f.kind_prefix and conn.dialect.lists_prefix_kinds and f.kind is None
            and f.queue is None and f.state is None):
        kinds = _prefix_kinds(conn, f.kind_prefix)
        return None if kinds is None else ("kind", kinds)
    return None


def _where(conn: Connection, now: int, f: JobFilter) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if f.state is not None:
        if f.state not in STORED_STATE_NAMES:
            raise InvalidInput(f"unknown state `{f.state}`")
        where.append("state = ?")
        params.append(f.state)
    for column, value in (
        ("id", f.id), ("queue", f.queue), ("kind", f.kind), ("partition_key", f.partition_key),
        ("rate_class", f.rate_class), ("fingerprint", f.fingerprint), ("priority", f.priority),
    ):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if f.rate_class:
        where.append("rate_class <> ''")  # lets the planners use the classed-only index
    for tag in f.tags_all:
        where.append(conn.dialect.tag_test("?"))
        params.append(tag)
    if f.tags_any:
        where.append(conn.dialect.tag_test(",".join("?" * len(f.tags_any))))
        params += list(f.tags_any)
    if f.older_than_ms is not None:
        where.append("enqueued_at_ms < ?")
        params.append(now - f.older_than_ms)
    for column, op, value in (
        ("enqueued_at_ms", ">=", f.enqueued_after_ms),
        ("enqueued_at_ms", "<", f.enqueued_before_ms),
        ("finalized_at_ms", ">=", f.finished_after_ms),
        ("finalized_at_ms", "<", f.finished_before_ms),
    ):
        if value is not None:
            where.append(f"{column} {op} ?")
            params.append(value)
    if f.error_prefix:
        # A range over jobs_last_error_id ("C" order on PostgreSQL, binary on SQLite):
        # the prefix is data, never a pattern.
        column = conn.dialect.binary_order("last_error")
        where += ["last_error <> ''", f"{column} >= ?", f"{column} < ?"]
        params += [f.error_prefix, f.error_prefix + "\U0010ffff"]
    return where, params


def list_jobs(
    conn: Connection, now: int, f: JobFilter, cursor: str | None, limit: int,
    include_payload: bool,
) -> JobPage:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}")
    if len(f.tags_all) > MAX_TAG_FILTERS or len(f.tags_any) > MAX_TAG_FILTERS:
        raise InvalidInput(f"at most {MAX_TAG_FILTERS} tags in a filter")
    before = decode_cursor(cursor) if cursor else None
    if f.payload_terms:
        return _payload_page(conn, now, f, before, limit, include_payload)
    cols = JOB_COLUMNS_WITH_PAYLOAD if include_payload else JOB_COLUMNS
    walked = _walked(conn, f)
    end = None if walked is None else _walk_end(conn, now, walked, before)
    rows = _rows(conn, now, f, before, limit + 1, cols, end)
    jobs = [row_to_job(r) for r in rows[:limit]]
    if len(rows) > limit:
        return JobPage(jobs, encode_cursor(jobs[-1].id))
    if end is not None:  # the walk stopped with jobs left below it
        return JobPage(jobs, encode_cursor(end), scan_limited=len(jobs) < limit)
    return JobPage(jobs, None)


def _walked(conn: Connection, f: JobFilter) -> JobFilter | None:
    """The part of `f` a page's index answers, when the rest is tested job by job along
    it; None when the index answers all of `f`, or `f` is one no bound is kept for (an
    id, an error prefix, a queue with a kind, a kind prefix SQLite branches on)."""
    if f.id is not None or f.error_prefix:
        return None
    if f.queue is not None:
        if f.kind is not None:
            return None  # which of two indexes the planner walks is its own choice
        walked = JobFilter(queue=f.queue, state=f.state)  # (queue, state, id)
    elif f.kind is not None:
        walked = JobFilter(kind=f.kind)  # (kind, id)
    elif f.kind_prefix and conn.dialect.lists_prefix_kinds:
        return None
    elif f.rate_class and f.state == "available":
        walked = JobFilter(rate_class=f.rate_class, state="available")
    elif f.fingerprint is not None and f.state == "quarantined":
        walked = JobFilter(fingerprint=f.fingerprint, state="quarantined")
    elif f == JobFilter(state=f.state):
        return None  # a state alone branches by queue, each branch exact
    else:
        walked = JobFilter()  # the primary key
    return None if walked == f else walked


def _walk_end(conn: Connection, now: int, walked: JobFilter,
              before: str | None) -> str | None:
    """The last id a page walking `walked`'s index looks at: SCAN_LIMIT jobs down from
    `before` (in each branch: the highest of their ends). None when fewer are left: the
    walk then reaches the end."""
    where, params, branches = _parts(conn, now, walked, before, None)
    sql, values = _statement(WALK_END, where, branches)
    ends = [row[0] for v in values
            if (row := conn.execute(sql, (*v, *params, SCAN_LIMIT - 1)).fetchone()) is not None]
    return str(max(ends)) if ends else None


def _payload_page(conn: Connection, now: int, f: JobFilter, before: str | None, limit: int,
                  include_payload: bool) -> JobPage:
    """Up to `limit` jobs whose decoded payload matches every payload term, within the
    scan bound: the SQL filters pick the candidates, SCAN_CHUNK at a time."""
    matches: list[tuple] = []
    scanned = size = 0
    while True:
        chunk = _rows(conn, now, f, before, SCAN_CHUNK, JOB_COLUMNS_WITH_PAYLOAD)
        for row in chunk:
            scanned += 1
            size += len(row[-1] or b"")
            before = row[0]
            if payload_matches(bytes(row[-1] or b""), f.payload_terms):
                matches.append(row)
                if len(matches) > limit:
                    break
            if scanned >= SCAN_LIMIT or size >= SCAN_BYTES:
                break
        else:
            if len(chunk) == SCAN_CHUNK:
                continue  # nothing stopped this chunk and more may follow
            limited = False
            break
        limited = len(matches) <= limit
        break
    jobs = [row_to_job(r) for r in matches[:limit]]
    if not include_payload:
        for job in jobs:
            job.payload = None
    if len(matches) > limit:
        return JobPage(jobs, encode_cursor(jobs[-1].id))
    if limited and before is not None:
        return JobPage(jobs, encode_cursor(before), scan_limited=True)
    return JobPage(jobs, None)


def _parts(conn: Connection, now: int, f: JobFilter, before: str | None,
           end: str | None) -> tuple[list[str], list[Any], tuple[str, list[Any]] | None]:
    """`f`'s SQL clauses and parameters with an id below `before` (and not below `end`),
    and its branches (`_branches`)."""
    where, params = _where(conn, now, f)
    if before is not None:
        where.append("id < ?")
        params.append(before)
    if end is not None:
        where.append("id >= ?")
        params.append(end)
    branches = _branches(conn, f)
    if f.kind_prefix and (branches is None or branches[0] != "kind"):
        # The prefix is data, never a pattern: no LIKE.
        where.append(conn.dialect.prefix_test("kind"))
        params += [f.kind_prefix] * where[-1].count("?")
    return where, params, branches


def _rows(conn: Connection, now: int, f: JobFilter, before: str | None, n: int,
          cols: str, end: str | None = None) -> list[tuple]:
    """The first `n` rows (`cols`, id first) matching `f`'s SQL filters with an id below
    `before` (and not below `end`), newest first."""
    where, params, branches = _parts(conn, now, f, before, end)
    sql, values = _statement(PAGE, where, branches, columns=cols)
    if branches is None:
        return conn.execute(sql, (*params, n)).fetchall()
    return merged(conn, sql, values, params, n, True)


def _statement(template: str, where: list[str], branches: tuple[str, list[Any]] | None,
               **fields: str) -> tuple[str, list[tuple]]:
    """`template` filled with the clauses, and the values its leading placeholders take
    per statement: one empty tuple without branches, else each branch's value (its
    column's equality leads the clauses)."""
    if branches is None:
        clause = " WHERE " + " AND ".join(where) if where else ""
        return fill(template, where=clause, **fields), [()]
    column, values = branches
    where = [f"{column} = ?", *where]
    return fill(template, where=" WHERE " + " AND ".join(where), **fields), [(v,) for v in values]
