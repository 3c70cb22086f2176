"""PostgresStore: the shared SQL on PostgreSQL, with LISTEN/NOTIFY and transactional
enqueue inside a caller's own psycopg transaction."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from headgate.adapters.shared import idempotency
from headgate.adapters.shared.enqueue_rows import EnqueueResult
from headgate.adapters.shared.queries import load
from headgate.adapters.shared.store import SqlStore
from headgate.core import Claim, Duplicate, Envelope, Outcome
from headgate.core.envelope import check_int, check_text
from headgate.core.records import IdempotencyRecord, TransactionHorizon
from headgate.store.activity import ActivityHub
from headgate.store.capabilities import Capabilities
from headgate.store.port import Answer, KeyedEnqueue

from . import bulk, enqueue, keyed
from .admission import ServerAdmission
from .announce import FinishedAnnouncer
from .async_enqueue import AsyncProducer
from .connection import PgDatabase, unavailable
from .notify import FinishedListener, Listener, Notifier, new_origin

log = logging.getLogger("headgate.postgres")

Q = load(__name__)
TRANSACTION_HORIZON = Q["transaction_horizon"]
SETTLE_PARTITIONS = Q["settle_partitions"]
ROLL_COUNTERS = Q["roll_counters"]


class PostgresStore(ServerAdmission, SqlStore):
    backend = "postgres"

    def __init__(self, url: str, *, migrate: bool = True, notify: bool = True,
                 pool_max: int = 8, statement_timeout_ms: int = 30_000,
                 crash_limit: int = 3) -> None:
        self.url = url
        self.path = url
        self.db = PgDatabase(url, max_size=pool_max, statement_timeout_ms=statement_timeout_ms)
        # The LISTEN connection starts with the first subscriber (a worker, a live view):
        # a producer would only hear its own enqueues, each a wake-up of a thread here
        # and of a backend there.
        self.activity = ActivityHub(self._listen if notify else None,
                                    self._heard if notify else None)
        self._listener: Listener | None = None
        self._finished: FinishedListener | None = None
        # Guards _closed and the two LISTEN threads: a thread started after close()
        # looked would retry its connection for the life of the process.
        self._listen_lock = threading.Lock()
        self._closed = False
        self.crash_limit = crash_limit
        self._policy_bound = {}  # see ServerAdmission
        self.notify = notify
        self.origin = new_origin()
        if migrate:
            self.db.migrate()
        self._notifier = Notifier(url, self.origin) if notify else None
        # Completions and failures reach live views coalesced (see announce.py).
        self._finished_announcer = FinishedAnnouncer(self._announce_finished)
        self._async_producer = AsyncProducer(url)
        self._keyed = keyed.KeyedBatcher(self.db)
        self._single = enqueue.EnqueueBatcher(self.db, self._origin)

    def _listen(self) -> None:
        with self._listen_lock:
            if not self._closed:
                self._listener = Listener(self.url, self.activity, self.origin)

    def _heard(self, timeout: float) -> bool:
        listener = self._listener
        return listener is not None and listener.connected.wait(timeout)

    def listening(self, timeout: float) -> bool:
        """Start listening if nothing has yet, and wait until the LISTEN is in place:
        True once notifications from other processes reach this store's hub (never
        for a store opened with notify=False)."""
        self.activity.interested()
        return self._heard(timeout)

    def watch_finished(self, job_id: str,
                       callback: Callable[[], None]) -> Callable[[], None] | None:
        """LISTEN-backed (headgate/db/postgres/functions/finished_notify.sql): only jobs
        carrying the ``headgate-result`` header are announced."""
        if not self.notify:
            return None
        with self._listen_lock:
            if self._closed:
                return None
            if self._finished is None:
                self._finished = FinishedListener(self.url)
            finished = self._finished
        return finished.watch(job_id, callback)

    def settle_partitions(self, limit: int = 1000) -> int:
        check_int("limit", limit, 1)
        with self.db.write() as (conn, _):
            return int(conn.execute(SETTLE_PARTITIONS, (limit,)).fetchone()[0])

    def roll_counters(self, wait_ms: int = 100) -> bool:
        check_int("wait_ms", wait_ms, 1)
        with self.db.write() as (conn, _):
            return int(conn.execute(ROLL_COUNTERS, (wait_ms,)).fetchone()[0]) > 0

    def transaction_horizon(self) -> TransactionHorizon:
        """The oldest open transaction of any client session on this database (not
        this query's) and the age of the oldest snapshot (`backend_xmin`): what keeps
        vacuum from removing the dead row versions every claim and ack leave. Idle
        sessions hold neither. Other roles' sessions show their times only to a role
        with pg_read_all_stats (e.g. pg_monitor)."""
        with self.db.read() as conn:
            age_ms, xmin_age = conn.execute(TRANSACTION_HORIZON).fetchone()
        return TransactionHorizon(
            "postgres", oldest_transaction_ms=None if age_ms is None else int(age_ms),
            transactions_seen="database", xmin_age=None if xmin_age is None else int(xmin_age))

    def capabilities(self) -> Capabilities:
        return Capabilities(transactional=True, notifying=self.notify, enqueue_many_in=True)

    def store_url(self) -> str:
        return self.url

    def now_ms(self) -> int:
        return self.db.now_ms()

    def close(self) -> None:
        with self._listen_lock:
            self._closed = True
            listener, finished = self._listener, self._finished
        if listener is not None:
            listener.close()
        self._finished_announcer.close()
        if self._notifier is not None:
            self._notifier.close()
        if finished is not None:
            finished.close()
        self.db.close()

    def _publish(self, queues: set[str] | str | None) -> None:
        if not queues:
            return
        names = {queues} if isinstance(queues, str) else set(queues)
        self.activity.publish(names)
        if self._notifier is not None:
            self._notifier.send(frozenset(names))

    def _announce_finished(self, queues: frozenset[str]) -> None:
        self.activity.publish(queues)
        if self._notifier is not None:
            self._notifier.send(queues)

    def ack(self, claim: Claim, outcome: Outcome, error: str | None = None,
            delay_ms: int | None = None, result: bytes | None = None, *,
            result_schema_version: int = 1, logs: Sequence[str] = ()) -> None:
        super().ack(claim, outcome, error, delay_ms, result,
                    result_schema_version=result_schema_version, logs=logs)
        self._finished_announcer.finished((claim.job.queue,))

    def enqueue_many(self, envelopes: Sequence[Envelope]) -> list[str]:
        """One round trip (see headgate/adapters/postgres/enqueue.py); the wake-up
        NOTIFY is part of the enqueue's transaction, so the notifier thread is not used."""
        envs = [e if e.fingerprint and e.id else e.validated() for e in envelopes]
        if not envs:
            return []
        if len(envs) == 1:  # shares a call with other threads' single jobs, if any
            return self._answer(self._single.run(envs[0]), publish=True)
        with self.db.autocommit() as conn:
            result = bulk.copy_batch(conn.raw, envs, self._origin()) \
                if bulk.qualifies(envs) else None
            if result is None:
                result = enqueue.call(conn.raw, envs, self._origin())
        return self._answer(result, publish=True)

    async def enqueue_many_async(self, envelopes: Sequence[Envelope], *,
                                 conn: Any = None) -> list[str]:
        """enqueue_many over psycopg's AsyncConnection: from this store's async pool
        (opened on first use), or inside ``conn``'s transaction (committed with it, or
        not at all)."""
        envs = [e.validated() for e in envelopes]
        if not envs:
            return []
        result = await self._async_producer.enqueue_many(envs, self._origin(), conn)
        return self._answer(result, publish=conn is None)

    def enqueue_many_in(self, conn: psycopg.Connection, envelopes: Sequence[Envelope]) -> list[str]:
        """Enqueue inside the caller's transaction: committed with it or not at all.
        The wake-up NOTIFY is transactional too, so a rollback wakes nobody."""
        envs = [e.validated() for e in envelopes]
        if not envs:
            return []
        try:
            result = enqueue.call(conn, envs, self._origin())
        except psycopg.OperationalError as exc:
            raise unavailable(exc) from exc
        return self._answer(result, publish=False)

    def enqueue_keyed(
        self, scope_key: str, request_hash: str, envelope: Envelope, answer: Answer,
        duplicate_answer: Callable[[Duplicate], Answer | None] | None = None,
        ttl_ms: int = idempotency.DAY_MS,
    ) -> KeyedEnqueue:
        """One statement in autocommit: the key's lock and record, the enqueue and its
        answer; concurrent requests of this process share one (see keyed.py)."""
        check_text("scope_key", scope_key)
        env = envelope if envelope.fingerprint and envelope.id else envelope.validated()
        done = keyed.decided(env, self._keyed.run(keyed.KeyedRequest(
            scope_key, request_hash, env, answer, self._origin(), ttl_ms)))
        if isinstance(done, IdempotencyRecord):
            return KeyedEnqueue(record=done)
        if done.inserted:
            self.activity.publish(done.queues)
        if done.duplicate is not None:
            if duplicate_answer is not None:
                keyed.store_replay(self.db, scope_key, request_hash, ttl_ms, done.duplicate,
                                   duplicate_answer)
            return KeyedEnqueue(duplicate=done.duplicate)
        return KeyedEnqueue(ids=done.ids)

    def _enqueue(self, conn: Any, now: int, envs: Sequence[Envelope]) -> EnqueueResult:
        """The enqueue policy in the current transaction (the periodic tick's): the
        function, with a transactional NOTIFY."""
        return enqueue.call(conn.raw, envs, self._origin())

    def _origin(self) -> str | None:
        return self.origin if self.notify else None

    def _answer(self, result: EnqueueResult, publish: bool) -> list[str]:
        """The ids, after waking this process's waiters (when the enqueue committed);
        a single envelope's Duplicate raised once its holder's replacement is."""
        if publish and result.inserted:
            self.activity.publish(result.queues)
        if result.duplicate is not None:
            raise result.duplicate
        return result.ids
