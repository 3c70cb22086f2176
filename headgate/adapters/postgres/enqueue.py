"""PostgreSQL enqueue in one round trip: the batch as arrays to `headgate_enqueue_v3`
(headgate/db/postgres/functions/enqueue.sql), which checks ids, quarantine, unique keys
and backpressure, inserts (the insert trigger counts the jobs and their arrivals) and
sends the wake-up NOTIFY inside the same transaction: PostgreSQL's statement of the
enqueue policy, as headgate/adapters/sqlite/enqueue.py is SQLite's.

Run in Python over the network, that policy cost about ten round trips (the clock,
BEGIN, each lock and check, each insert, COMMIT), and a producer's call waits for every
one of them. Here a standalone enqueue is one autocommit statement, and one statement
inside a caller's transaction (an HTTP request's, with its idempotency record).

Single jobs that threads of one process enqueue at the same moment go as one batch
(`EnqueueBatcher`): every enqueue holds its queue's lock, and its NOTIFY PostgreSQL's
database-wide commit lock, across its commit's WAL flush, so one at a time they wait
for each other's flush.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import psycopg

from headgate.adapters.shared.combiner import Combiner, Slot
from headgate.adapters.shared.enqueue_rows import EnqueueResult, effective_unique_key
from headgate.adapters.shared.queries import fill, load
from headgate.adapters.shared.rows import headers_text, tags_text
from headgate.core import (
    Backpressure,
    Duplicate,
    Envelope,
    IdConflict,
    InvalidInput,
    Quarantined,
)

from .connection import PgDatabase

R = TypeVar("R")
T = TypeVar("T")

Q = load(__name__)
RESULT = Q["result"]
ONE_ARGS = Q["one_args"]
ENQUEUE_ONE = fill(Q["enqueue_one"], result=RESULT, one_args=ONE_ARGS)
ENQUEUE_PLAIN = Q["enqueue_plain"]
ENQUEUE_MANY = fill(Q["enqueue_many"], result=RESULT)


# The function's arguments in order (one per column); ENQUEUE_PLAIN binds them by name.
ROW_FIELDS = (
    "id", "kind", "schema_version", "payload", "fingerprint", "queue", "priority",
    "partition_key", "rate_class", "weight", "scheduled_at_ms", "max_attempts",
    "retention_ms", "tags", "sticky_worker", "headers", "periodic_schedule_id",
    "periodic_tick_ms", "pending", "unique_key", "unique_window_ms", "unique_replace",
    "unique_debounce_ms",
)


def _row(e: Envelope) -> list:
    return [
        e.id, e.kind, e.schema_version, e.payload, e.fingerprint, e.queue, e.priority,
        e.partition_key, e.rate_class, e.weight, e.scheduled_at_ms, e.max_attempts,
        e.retention_ms, tags_text(e.tags), e.sticky_worker, headers_text(e.headers),
        e.periodic_schedule_id, e.periodic_tick_ms, e.pending, effective_unique_key(e),
        e.unique_window_ms, e.unique_replace, e.unique_debounce_ms,
    ]


def _plain_params(e: Envelope, origin: str | None) -> dict:
    return {**dict(zip(ROW_FIELDS, _row(e), strict=True)), "origin": origin}


def columns(envs: Sequence[Envelope]) -> list[list]:
    """One list per column, shortened to one element where the whole batch holds one
    value (the server repeats it)."""
    columns = [list(values) for values in zip(*map(_row, envs), strict=True)]
    n = len(envs)
    # ids differ within a batch; count() compares in C, identity first.
    return columns[:1] + [
        values[:1] if values.count(values[0]) == n else values for values in columns[1:]
    ]


def check_ids(envs: Sequence[Envelope]) -> None:
    ids = [e.id for e in envs]
    if len(set(ids)) != len(ids):
        raise InvalidInput("batch contains the same id twice")


def plain(env: Envelope) -> bool:
    """Whether the early exit may decide `env` (nothing a unique key asks for)."""
    return env.unique_key is None


def inserted_plainly(env: Envelope) -> EnqueueResult:
    """What the early exit's one inserted row means."""
    return EnqueueResult(ids=[env.id], inserted=1, queues={env.queue})  # type: ignore[list-item]


def call(raw: psycopg.Connection, envs: Sequence[Envelope],
         origin: str | None) -> EnqueueResult:
    """Run the function on `raw` (in whatever transaction it is in); raise what
    SQLite's enqueue raises, else return what it returns."""
    check_ids(envs)
    if len(envs) == 1:
        env = envs[0]
        # ENQUEUE_PLAIN is an aggregate: always one row, never None.
        if plain(env) and raw.execute(  # type: ignore[index]
                ENQUEUE_PLAIN, _plain_params(env, origin)).fetchone()[0]:
            return inserted_plainly(env)
        row = raw.execute(ENQUEUE_ONE, [*_row(env), origin]).fetchone()
    else:
        row = raw.execute(ENQUEUE_MANY, [*columns(envs), origin]).fetchone()
    return result(envs, row)


def result(envs: Sequence[Envelope], row: tuple | None) -> EnqueueResult:
    """What an enqueue call's result row says; a refusal raised as the typed error
    SQLite's enqueue raises. A single envelope's Duplicate is returned (its holder's
    replacement is written), a batch's raised (the function wrote nothing)."""
    assert row is not None
    outcome, subject, limit, current, incoming, queues, holder, replaced, inserted = row
    if outcome == "id_conflict":
        raise IdConflict(subject)
    if outcome == "quarantined":
        raise Quarantined(subject)
    if outcome == "repeated_key":
        raise InvalidInput("batch contains the same unique key twice")
    if outcome == "backpressure":
        raise Backpressure(subject, int(limit), int(current), int(incoming))
    if outcome == "duplicate":
        duplicate = Duplicate(holder, bool(replaced))
        if len(envs) > 1:
            raise duplicate
        return EnqueueResult(ids=[holder], inserted=0, queues=set(), duplicate=duplicate)
    return EnqueueResult(ids=[e.id for e in envs], inserted=int(inserted),  # type: ignore[misc]
                         queues=set(queues or ()))


# What a batch's call raises having written nothing, for one of its envelopes' sake.
# Anything else (the store unreachable, a commit whose answer was lost) is every
# envelope's answer: sent again, one that did commit would be refused as its own
# id's conflict.
REFUSALS = (Backpressure, IdConflict, InvalidInput, Quarantined)


class EnqueueBatcher(Combiner[Envelope, EnqueueResult]):
    """`run(env)`: one validated envelope enqueued in autocommit, as `call` does, but
    sharing the call and its commit with the envelopes other threads are enqueueing
    (the module says why). Only envelopes without a unique key share one: a batch
    passes the checks as a whole, so when it succeeds each of its jobs would have alone,
    in turn. A refused batch is sent again one envelope at a time, so each gets its
    own answer."""

    def __init__(self, db: PgDatabase, origin: Callable[[], str | None]) -> None:
        super().__init__()
        self.db = db
        self.origin = origin

    def _serve(self) -> None:
        batch = self._take()
        shared = [slot for slot in batch if plain(slot.request)]
        if len(shared) > 1 and len({slot.request.id for slot in shared}) == len(shared):
            try:
                with self.db.autocommit() as conn:
                    call(conn.raw, [slot.request for slot in shared], self.origin())
            except REFUSALS:
                pass  # the batch wrote nothing: each envelope's own call says why
            else:
                for slot in shared:
                    slot.result = inserted_plainly(slot.request)
        serve_alone(self.db, [s for s in batch if s.result is None],
                    lambda raw, env: call(raw, [env], self.origin()))


def serve_alone(db: PgDatabase, slots: Sequence[Slot[R, T]],
                call_one: Callable[[psycopg.Connection, R], T]) -> None:
    """Each slot's request in an autocommit call of its own: what a batch that could not
    share one falls back to. An error is that request's answer."""
    for slot in slots:
        try:
            with db.autocommit() as conn:
                slot.result = call_one(conn.raw, slot.request)
        except Exception as exc:  # noqa: BLE001 - the request's own thread raises it
            slot.error = exc
