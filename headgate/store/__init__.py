"""The store port and the factory that picks an adapter from a URL."""

from __future__ import annotations

from .activity import ActivityHub
from .port import Store


def open_store(url: str, *, migrate: bool = True, **options: object) -> Store:
    """`sqlite:///path.db` (or a bare path) or `postgresql://…`."""
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from headgate.adapters.postgres import PostgresStore
        except ImportError as exc:  # pragma: no cover - only before the adapter exists
            raise ValueError("the postgres adapter is not available") from exc
        return PostgresStore(url, migrate=migrate, **options)  # type: ignore[arg-type]
    from headgate.adapters.sqlite import SqliteStore

    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
    if url.startswith("sqlite://") and not url.startswith("sqlite:///"):
        raise ValueError("sqlite URLs look like sqlite:///path/to/file.db")
    return SqliteStore(path, migrate=migrate, **options)  # type: ignore[arg-type]


__all__ = ["ActivityHub", "Store", "open_store"]
