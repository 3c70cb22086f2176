"""ApiStorageMixin: what the control API needs from the store beyond the engine —
bulk operations, queue delete, memory sampling, stored idempotent responses.

A mixin (rather than more methods in store.py) so the API's storage lives in its own
modules; SqliteStore inherits it, and PostgresStore inherits it through SqliteStore,
because the SQL modules behind it use only the subset both engines share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from headgate.core import Duplicate, Envelope, StoreUnavailable
from headgate.core.envelope import check_int, check_text
from headgate.core.records import IdempotencyRecord, Operation, QueueExtras
from headgate.store.port import Answer, IdempotentWrite, KeyedEnqueue

from . import idempotency, operations, queue_admin

T = TypeVar("T")

class ApiStorageMixin:
    if TYPE_CHECKING:  # provided by the concrete store
        db: Any

        def now_ms(self) -> int: ...

        activity: Any

        def _publish(self, queues: set[str] | str | None) -> None: ...

        def enqueue_many_in(self, conn: Any, envelopes: Sequence[Envelope]) -> list[str]: ...

    # -- bulk operations -----------------------------------------------------------------
    def create_operation(self, action: str, selector: dict[str, Any],
                         dry_run: bool = False) -> Operation:
        """Record a bulk action over the jobs `selector` names, with a bounded estimate.
        A dry run is done at once (its answer is `total_estimated`); otherwise it is
        queued for `run_operations_batch`."""
        with self.db.write() as (conn, now):
            return operations.create(conn, now, action, selector, dry_run)

    def get_operation(self, op_id: str) -> Operation | None:
        with self.db.read() as conn:
            return operations.get(conn, op_id)

    def run_operations_batch(self, limit: int = 500) -> int:
        """Advance active operations by at most `limit` jobs in total, one transaction
        per batch; returns how many jobs were affected. Safe to call from several
        processes at once (the write lock / SKIP LOCKED picks distinct work)."""
        check_int("limit", limit, 1)
        done = 0
        for _ in range(8):  # bound the finished-with-nothing-left hops per call
            if done >= limit:
                break
            # A read first: an idle poll must not take the write lock.
            with self.db.read() as conn:
                if operations.active_id(conn) is None:
                    break
            op_id: str | None = None
            try:
                with self.db.write() as (conn, now):
                    op_id = operations.active_id(conn)
                    affected, queues, found = operations.run_batch(conn, now, limit - done)
            except StoreUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 - record it on the operation, not lose it
                if op_id is None:
                    raise
                with self.db.write() as (conn, now):
                    operations.fail(conn, now, op_id, f"{type(exc).__name__}: {exc}")
                continue
            self._publish(queues)
            done += affected
            if not found or affected:
                break
        return done

    def delete_queue(self, queue: str, force: bool = False) -> str | None:
        """Delete an empty queue (None), or with `force` start an operation deleting its
        jobs first (its id). NotFound for an unknown queue; InvalidTransition when the
        queue still holds jobs and `force` is not given."""
        with self.db.write() as (conn, now):
            op = operations.delete_queue(conn, now, queue, bool(force))
        self._publish(queue)
        return op

    # -- queue figures -------------------------------------------------------------------
    def sample_queue_memory(self, limit: int = 100) -> int:
        """Estimate memory of up to `limit` queues (least recently sampled first) from a
        bounded sample each; returns how many queues were sampled."""
        with self.db.read() as conn:
            measured = {
                q: queue_admin.measure(conn, q)
                for q in queue_admin.pick_sample_queues(conn, limit)
            }
        if measured:
            with self.db.write() as (conn, now):
                queue_admin.record(conn, now, measured)
        return len(measured)

    def queue_extras(self) -> dict[str, QueueExtras]:
        with self.db.read_with_clock() as (conn, now):
            return queue_admin.extras(conn, now)

    # -- idempotency ---------------------------------------------------------------------
    def idempotency_begin(self, scope_key: str, request_hash: str,
                          ttl_ms: int = idempotency.DAY_MS) -> IdempotencyRecord | None:
        check_text("scope_key", scope_key)
        with self.db.write() as (conn, now):
            return idempotency.begin(conn, now, scope_key, request_hash, ttl_ms)

    def idempotency_complete(self, scope_key: str, status: int, headers: dict[str, str],
                             body: bytes) -> None:
        with self.db.write() as (conn, _):
            idempotency.complete(conn, scope_key, status, headers, body)

    def idempotency_abort(self, scope_key: str) -> None:
        with self.db.write() as (conn, _):
            idempotency.abort(conn, scope_key)

    def enqueue_keyed(
        self, scope_key: str, request_hash: str, envelope: Envelope, answer: Answer,
        duplicate_answer: Callable[[Duplicate], Answer | None] | None = None,
        ttl_ms: int = idempotency.DAY_MS,
    ) -> KeyedEnqueue:
        """One write transaction (see idempotent_write; write_combined); PostgreSQL's is
        one statement of its own."""
        check_text("scope_key", scope_key)
        done = self.write_combined(lambda conn, now: self.enqueue_keyed_in(
            conn, now, scope_key, request_hash, envelope, answer, duplicate_answer, ttl_ms))
        if done.record is None:
            self.activity.publish({envelope.queue})
        return done

    def write_combined(self, action: Callable[[Any, int], T]) -> T:
        """`action(conn, now)` in a write transaction of its own; an engine may let
        concurrent callers' actions share one (SQLite's group commit)."""
        with self.db.write() as (conn, now):
            return action(conn, now)

    def enqueue_keyed_in(
        self, conn: Any, now: int, scope_key: str, request_hash: str, envelope: Envelope,
        answer: Answer, duplicate_answer: Callable[[Duplicate], Answer | None] | None,
        ttl_ms: int,
    ) -> KeyedEnqueue:
        """enqueue_keyed's writes in the caller's write transaction: the key's record
        (its lock held to the commit), the enqueue, the answer stored."""
        record = idempotency.peek(conn, now, scope_key)
        if record is not None:
            return KeyedEnqueue(record=record)
        try:
            # The connection a producer Client's conn= takes: PostgreSQL's
            # enqueue_many_in wants the driver's connection, SQLite's this one.
            ids = self.enqueue_many_in(getattr(conn, "raw", conn), [envelope])
        except Duplicate as dup:
            # A replace of the holder commits; with no replay the key stays free.
            replay = duplicate_answer(dup) if duplicate_answer is not None else None
            if replay is not None:
                idempotency.store_done(conn, now, scope_key, request_hash, ttl_ms, *replay)
            return KeyedEnqueue(duplicate=dup)
        idempotency.store_done(conn, now, scope_key, request_hash, ttl_ms, *answer)
        return KeyedEnqueue(ids=ids)

    @contextmanager
    def idempotent_write(self, scope_key: str, request_hash: str,
                         ttl_ms: int = idempotency.DAY_MS) -> Iterator[IdempotentWrite]:
        """The key's record, the caller's action and the stored answer in ONE write
        transaction: one commit per request instead of three, and a concurrent retry
        waits for the key's lock and then replays, where it used to be told 409. An
        answer never stored (an error, or `forget`) leaves the key free."""
        check_text("scope_key", scope_key)
        with self.db.write() as (conn, now):
            # No in-progress row: nothing outside this transaction could see one, and
            # the key's lock (PostgreSQL) or the one writer (SQLite) holds off a retry.
            record = idempotency.peek(conn, now, scope_key)
            # The connection a producer Client's conn= takes: PostgreSQL's
            # enqueue_many_in wants the driver's connection, SQLite's this one.
            tx = IdempotentWrite(record, getattr(conn, "raw", conn))
            if record is None:
                def store(status: int, headers: dict[str, str], body: bytes) -> None:
                    if status:
                        idempotency.store_done(conn, now, scope_key, request_hash, ttl_ms,
                                               status, headers, body)
                    else:  # a retry runs again
                        idempotency.forget(conn, scope_key)
                tx._store = store
            yield tx
        if tx.queues:
            self.activity.publish(tx.queues)  # in-process only: PostgreSQL's NOTIFY is
            # part of the enqueue's transaction, and SQLite's other processes poll
