"""Enqueue: identity, quarantine, uniqueness and backpressure, all-or-nothing.

SQLite's statement of the enqueue policy, run inside its one write transaction (one
writer: nothing here takes a lock). PostgreSQL's is the function `headgate_enqueue_v3`
(headgate/db/postgres/functions/enqueue.sql), which decides the same, check for check and
in the same order; tests/store runs both against the same behaviour tests.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from enum import Enum
from typing import Final, cast

from headgate.adapters.shared.conn import Connection
from headgate.adapters.shared.control import ENSURE_QUEUE
from headgate.adapters.shared.enqueue_rows import EnqueueResult, effective_unique_key, insert_row
from headgate.adapters.shared.queries import fill, load
from headgate.adapters.shared.rows import bump_history
from headgate.core import (
    TERMINAL,
    UNFINISHED,
    Backpressure,
    Duplicate,
    Envelope,
    IdConflict,
    InvalidInput,
    Quarantined,
    State,
)
from headgate.core.schema_constants import (
    REPLACE_MAX_ATTEMPTS,
    REPLACE_PAYLOAD,
    REPLACE_PRIORITY,
    REPLACE_SCHEDULED_AT,
)

CHUNK = 500
AVAILABLE = State.AVAILABLE.value

# A row's placeholders; the last column is `counted` (insert_jobs in sql/enqueue.sql).
ROW_MARKS = "(" + "?, " * 21 + "0)"
BATCH_ROW_MARKS = "(" + "?, " * 21 + "1)"
INSERT_CHUNK = 400  # rows per statement, under SQLite's variable cap

Q = load(__name__)
INSERT_JOBS = Q["insert_jobs"]
COUNT_BATCH = Q["count_batch"]
PARTITIONS_BATCH = Q["partitions_batch"]
SELECT_IDENTITY = Q["select_identity"]
SELECT_QUARANTINED = Q["select_quarantined"]
SELECT_LIMITS = Q["select_limits"]
SELECT_UNFINISHED = fill(Q["select_unfinished"],
                         states=", ".join(f"'{s.value}'" for s in UNFINISHED))
SELECT_UNIQUE = Q["select_unique"]
UPSERT_UNIQUE = Q["upsert_unique"]
SELECT_HOLDER = Q["select_holder"]
PROBE_ONE = Q["probe_one"]
INSERT_ONE = INSERT_JOBS.format(rows=ROW_MARKS)
REPLACE_HOLDER = Q["replace_holder"]


def _identity(env: Envelope) -> tuple:
    return (
        env.kind, env.schema_version, env.payload, env.queue, env.priority, env.partition_key,
        env.rate_class, env.weight, env.max_attempts, json.dumps(list(env.tags)),
        env.sticky_worker, json.dumps(env.headers, sort_keys=True),
    )


def _chunks(items: list, size: int = CHUNK):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def enqueue(conn: Connection, now: int, envs: Sequence[Envelope]) -> EnqueueResult:
    """Insert validated envelopes. A Duplicate on a single envelope is returned (so a
    replace/debounce commits); in a batch it is raised so the batch writes nothing."""
    if len(envs) == 1:
        return _enqueue_one(conn, now, envs[0])
    return _enqueue_batch(conn, now, envs)


def _enqueue_one(conn: Connection, now: int, env: Envelope) -> EnqueueResult:
    """`enqueue` for one envelope, its checks in the batch's order, its lookups in
    one read (each statement inside SQLite's write lock is a wait for the GIL when
    other threads are running)."""
    key = effective_unique_key(env)
    taken, quarantined, limit, has_queue, holder_id, expires = conn.execute(
        PROBE_ONE, (env.id, env.fingerprint, env.queue, env.queue, key)
    ).fetchone()
    if taken:  # its identity decides: a replay or IdConflict
        return _enqueue_batch(conn, now, [env])
    if quarantined:
        raise Quarantined(env.fingerprint)  # type: ignore[arg-type]
    result = EnqueueResult(ids=[env.id], inserted=0, queues={env.queue})  # type: ignore[list-item]
    if key is not None:
        held_by = None if holder_id is None else (holder_id, expires)
        dup = _claim_unique(conn, now, env, key, held_by=held_by)
        if dup is not None:
            result.duplicate = dup
            result.ids = [dup.existing_id]
            return result
    if limit is not None:
        current = int(conn.execute(SELECT_UNFINISHED, (env.queue,)).fetchone()[0])
        if current + 1 > limit:
            raise Backpressure(env.queue, limit, current, 1)
    if not has_queue:
        conn.execute(ENSURE_QUEUE, (env.queue, now))
    conn.execute(INSERT_ONE, insert_row(env, now))  # its trigger records the arrival
    result.inserted = 1
    return result


def _enqueue_batch(conn: Connection, now: int, envs: Sequence[Envelope]) -> EnqueueResult:
    ids = cast("list[str]", [env.id for env in envs])  # validated: each has an id
    if len(set(ids)) != len(ids):
        raise InvalidInput("batch contains the same id twice")
    existing = _existing(conn, ids)
    fresh: list[Envelope] = []
    for env in envs:
        row = existing.get(env.id)  # type: ignore[arg-type]
        if row is None:
            fresh.append(env)
            continue
        stored = (
            row[1], row[2], bytes(row[3]), *row[4:12],
            json.dumps(json.loads(row[12]), sort_keys=True),
        )
        if stored != _identity(env):
            raise IdConflict(env.id)  # type: ignore[arg-type]
    result = EnqueueResult(ids=ids, inserted=0, queues={e.queue for e in fresh})
    if not fresh:
        return result

    fps = sorted(cast("set[str]", {e.fingerprint for e in fresh}))  # validated: all set
    for chunk in _chunks(fps):
        hit = conn.execute(
            SELECT_QUARANTINED.format(marks=",".join("?" * len(chunk))), chunk
        ).fetchone()
        if hit:
            raise Quarantined(hit[0])

    seen_keys: set[bytes] = set()
    for env in fresh:
        key = effective_unique_key(env)
        if key is None:
            continue
        if key in seen_keys:  # the first of them is not stored: no existing id to name
            raise InvalidInput("batch contains the same unique key twice")
        # A batch (this path's only caller with fresh envelopes) is refused whole: its
        # holder is left as it was.
        dup = _claim_unique(conn, now, env, key, replace=False)
        if dup is not None:
            raise dup
        seen_keys.add(key)

    _check_backpressure(conn, fresh)
    for queue in result.queues:
        conn.execute(ENSURE_QUEUE, (queue, now))
    rows = [insert_row(env, now) for env in fresh]
    for chunk in _chunks(rows, INSERT_CHUNK):
        sql = INSERT_JOBS.format(rows=", ".join([BATCH_ROW_MARKS] * len(chunk)))
        conn.execute(sql, [value for row in chunk for value in row])
    _count_batch(conn, rows)
    arrived = Counter(e.queue for e in fresh)
    bump_history(conn, now, {q: {"arrived": n} for q, n in arrived.items()})
    result.inserted = len(fresh)
    return result


def _count_batch(conn: Connection, rows: list[tuple]) -> None:
    """What the insert triggers (migration 17) would have counted row by row: every row
    in its (queue, state), and a waiting job in its (queue, partition)."""
    states = Counter((row[5], row[10]) for row in rows)
    waiting = Counter((row[5], row[7]) for row in rows if row[10] == AVAILABLE)
    conn.executemany(COUNT_BATCH, [(q, s, n) for (q, s), n in sorted(states.items())])
    if waiting:
        conn.executemany(PARTITIONS_BATCH,
                         [(q, p, n) for (q, p), n in sorted(waiting.items())])


def _existing(conn: Connection, ids: list[str]) -> dict[str, tuple]:
    found: dict[str, tuple] = {}
    for chunk in _chunks(ids):
        sql = SELECT_IDENTITY.format(marks=",".join("?" * len(chunk)))
        for row in conn.execute(sql, chunk):
            found[row[0]] = row
    return found


def _check_backpressure(conn: Connection, fresh: list[Envelope]) -> None:
    incoming = Counter(e.queue for e in fresh)
    names = sorted(incoming)
    limits = conn.execute(
        SELECT_LIMITS.format(marks=",".join("?" * len(names))), names
    ).fetchall()
    for queue, limit in limits:
        current = int(conn.execute(SELECT_UNFINISHED, (queue,)).fetchone()[0])
        if current + incoming[queue] > limit:
            raise Backpressure(queue, limit, current, incoming[queue])


class _Unread(Enum):
    """`_claim_unique`'s default `held_by`: an enum member, so mypy can narrow it away."""
    UNREAD = 0


_UNREAD: Final = _Unread.UNREAD


def _claim_unique(
    conn: Connection, now: int, env: Envelope, key: bytes, replace: bool = True,
    held_by: tuple[str, int | None] | None | _Unread = _UNREAD,
) -> Duplicate | None:
    """A key is held until its window ends, or, without a window, while its holder is
    unfinished (and a held key's holder takes `env`'s replacements, if `replace`);
    else it now names this envelope's job. `held_by`: the key's row (job_id,
    expires_at_ms) or None, when the caller read it already."""
    row = conn.execute(SELECT_UNIQUE, (key,)).fetchone() if held_by is _UNREAD else held_by
    if row is not None:
        holder_id, expires = row
        holder = conn.execute(SELECT_HOLDER, (holder_id,)).fetchone()
        if expires is not None:
            held = now < expires
        else:
            held = holder is not None and State(holder[0]) not in TERMINAL
        if held:
            replaced = False
            if holder is not None and replace:
                replaced = _replace_holder(conn, now, env, holder_id, State(holder[0]))
            return Duplicate(holder_id, replaced)
    expires_at = now + env.unique_window_ms if env.unique_window_ms > 0 else None
    conn.execute(UPSERT_UNIQUE, (key, env.id, expires_at))
    return None


def _replace_holder(
    conn: Connection, now: int, env: Envelope, holder_id: str, state: State
) -> bool:
    """Apply unique_replace bits or debounce to a holder that is not running. A due
    time moves only where one is waited for (scheduled, retryable; bit 2 also pending):
    an available job would need a transition the lifecycle does not have."""
    if state is State.RUNNING or state in TERMINAL:
        return False
    sets: dict[str, object] = {}
    if env.unique_debounce_ms > 0:
        sets.update(payload=env.payload, fingerprint=env.fingerprint,
                    schema_version=env.schema_version, tags=json.dumps(list(env.tags)))
        if state in (State.SCHEDULED, State.RETRYABLE):
            sets["scheduled_at_ms"] = now + env.unique_debounce_ms
    bits = env.unique_replace
    if bits & REPLACE_PAYLOAD:
        sets.update(payload=env.payload, fingerprint=env.fingerprint,
                    schema_version=env.schema_version, headers=json.dumps(env.headers))
    if bits & REPLACE_SCHEDULED_AT and state in (State.SCHEDULED, State.RETRYABLE,
                                                 State.PENDING):
        sets["scheduled_at_ms"] = env.scheduled_at_ms or now
    if bits & REPLACE_PRIORITY:
        sets["priority"] = env.priority
    if bits & REPLACE_MAX_ATTEMPTS:
        sets["max_attempts"] = env.max_attempts
    if not sets:
        return False
    assignments = ", ".join(f"{column} = ?" for column in sets)
    conn.execute(fill(REPLACE_HOLDER, assignments=assignments), (*sets.values(), holder_id))
    return True
