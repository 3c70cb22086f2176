"""The embedded SQLite adapter (default backend)."""

from .store import SqliteStore

__all__ = ["SqliteStore"]
