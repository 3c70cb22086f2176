"""PostgresStore: the shared SQL on PostgreSQL, with LISTEN/NOTIFY and transactional
enqueue inside a caller's own psycopg transaction."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg

from headgate.adapters.sql import enqueue
from headgate.adapters.sql.store import SqlStore
from headgate.core import Envelope
from headgate.store.activity import ActivityHub

from .admission import ServerAdmission
from .connection import CLOCK, PgConnection, PgDatabase, unavailable
from .notify import CHANNEL, Listener, Notifier, encode, new_origin

log = logging.getLogger("headgate.postgres")


class PostgresStore(ServerAdmission, SqlStore):
    backend = "postgres"

    def __init__(self, url: str, *, migrate: bool = True, notify: bool = True,
                 pool_max: int = 8, statement_timeout_ms: int = 30_000,
                 crash_limit: int = 3) -> None:
        self.url = url
        self.path = url
        self.db = PgDatabase(url, max_size=pool_max, statement_timeout_ms=statement_timeout_ms)
        self.activity = ActivityHub()
        self.crash_limit = crash_limit
        self.notify = notify
        self.origin = new_origin()
        if migrate:
            self.db.migrate()
        self._listener = Listener(url, self.activity, self.origin) if notify else None
        self._notifier = Notifier(url, self.origin) if notify else None

    def capabilities(self) -> tuple[str, ...]:
        caps = ["transactional", "inspect"]
        if self.notify:
            caps.insert(1, "notifying")
        return tuple(caps)

    def now_ms(self) -> int:
        return self.db.now_ms()

    def close(self) -> None:
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

    def enqueue_many_in(self, conn: psycopg.Connection, envelopes: Sequence[Envelope]) -> list[str]:
        """Enqueue inside the caller's transaction: committed with it or not at all.
        The wake-up NOTIFY is transactional too, so a rollback wakes nobody."""
        envs = [e.validated() for e in envelopes]
        if not envs:
            return []
        shim = PgConnection(conn)
        try:
            now = int(shim.execute(CLOCK).fetchone()[0])
            result = enqueue.enqueue(shim, now, envs)
            if result.inserted and self.notify:
                payload = encode(result.queues, self.origin)
                shim.execute("SELECT pg_notify(?, ?)", (CHANNEL, payload))
        except psycopg.OperationalError as exc:
            raise unavailable(exc) from exc
        if result.duplicate is not None:
            raise result.duplicate
        return result.ids
