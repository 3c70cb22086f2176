"""How `open_store` opens a sqlite:/// URL (or a bare path): the SQLite row of the
adapter table in headgate/store/registry.py."""

from __future__ import annotations

from typing import Any

from headgate.store.registry import Opened

from .connection import known_versions
from .store import SqliteStore


def open_sqlite(url: str, **options: Any) -> Opened:
    if url.startswith("sqlite://") and not url.startswith("sqlite:///"):
        raise ValueError("sqlite URLs look like sqlite:///path/to/file.db")
    path = url.removeprefix("sqlite:///")
    store = SqliteStore(path, migrate=False, **options)
    return Opened(store, store.db, frozenset(known_versions()))


__all__ = ["open_sqlite"]
