"""PostgresStore: the shared SQL on PostgreSQL, with LISTEN/NOTIFY and transactional
enqueue inside a caller's own psycopg transaction."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg

from headgate.adapters.sql.store import SqlStore
from headgate.core import Envelope
from headgate.store.activity import ActivityHub

from . import enqueue
from .admission import ServerAdmission
from .connection import PgConnection, PgDatabase, unavailable
from .notify import Listener, Notifier, new_origin

log = logging.getLogger("headgate.postgres")


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
        self.activity = ActivityHub(self._listen if notify else None)
        self._listener: Listener | None = None
        self._closed = False
        self.crash_limit = crash_limit
        self._policy_bound = {}  # see ServerAdmission
        self.notify = notify
        self.origin = new_origin()
        if migrate:
            self.db.migrate()
        self._notifier = Notifier(url, self.origin) if notify else None

    def _listen(self) -> None:
        if not self._closed:
            self._listener = Listener(self.url, self.activity, self.origin)

    def listening(self, timeout: float) -> bool:
        """Start listening if nothing has yet, and wait until the LISTEN is in place:
        True once notifications from other processes reach this store's hub."""
        self.activity.interested()
        return self._listener is not None and self._listener.connected.wait(timeout)

    def capabilities(self) -> tuple[str, ...]:
        caps = ["transactional", "inspect"]
        if self.notify:
            caps.insert(1, "notifying")
        return tuple(caps)

    def now_ms(self) -> int:
        return self.db.now_ms()

    def close(self) -> None:
        self._closed = True
        if self._listener is not None:
            self._listener.close()
        if self._notifier is not None:
            self._notifier.close()
        self.db.close()

    def _publish(self, queues: set[str] | str | None) -> None:
        if not queues:
            return
        names = {queues} if isinstance(queues, str) else set(queues)
        self.activity.publish(names)
        if self._notifier is not None:
            self._notifier.send(frozenset(names))

    def enqueue_many(self, envelopes: Sequence[Envelope]) -> list[str]:
        """One round trip (see headgate/adapters/postgres/enqueue.py); the wake-up
        NOTIFY is part of the enqueue's transaction, so the notifier thread is not used."""
        envs = [e if e.fingerprint and e.id else e.validated() for e in envelopes]
        if not envs:
            return []
        origin = self.origin if self.notify else None
        if enqueue.has_unique_key(envs):
            with self.db.transaction() as conn:
                result = enqueue.shared_enqueue(conn, envs, origin)
            if result.inserted:
                self.activity.publish(result.queues)
            if result.duplicate is not None:
                raise result.duplicate
            return result.ids
        with self.db.autocommit() as conn:
            queues = enqueue.call(conn.raw, envs, origin)
        if queues:
            self.activity.publish(queues)
        return [e.id for e in envs]  # type: ignore[misc]

    def enqueue_many_in(self, conn: psycopg.Connection, envelopes: Sequence[Envelope]) -> list[str]:
        """Enqueue inside the caller's transaction: committed with it or not at all.
        The wake-up NOTIFY is transactional too, so a rollback wakes nobody."""
        envs = [e.validated() for e in envelopes]
        if not envs:
            return []
        origin = self.origin if self.notify else None
        try:
            if enqueue.has_unique_key(envs):
                result = enqueue.shared_enqueue(PgConnection(conn), envs, origin)
                if result.duplicate is not None:
                    raise result.duplicate
                return result.ids
            enqueue.call(conn, envs, origin)
        except psycopg.OperationalError as exc:
            raise unavailable(exc) from exc
        return [e.id for e in envs]  # type: ignore[misc]
