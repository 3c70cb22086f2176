"""How `open_store` opens a postgresql:// URL: the PostgreSQL row of the adapter table
in headgate/store/registry.py (which imports psycopg first, so a missing extra is one
MissingExtra)."""

from __future__ import annotations

from typing import Any

import psycopg

from headgate.store.registry import Opened

from .connection import known_versions
from .outage import CONNECT_TIMEOUT_S, unavailable
from .store import PostgresStore


def open_postgres(url: str, **options: Any) -> Opened:
    _probe(url)
    store = PostgresStore(url, migrate=False, **options)
    return Opened(store, store.db, frozenset(known_versions()))


def _probe(url: str) -> None:
    """One direct connection first: through the pool, an unreachable server costs the
    pool's whole timeout (10 s) and a warning per reconnection attempt."""
    try:
        psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg.Error as exc:
        raise unavailable(exc) from exc


__all__ = ["open_postgres"]
