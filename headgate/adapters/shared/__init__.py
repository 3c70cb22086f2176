"""The store port over the SQL both engines run (see dialect.py for where they differ).
Enqueue and admission are each engine's own: adapters/sqlite/, adapters/postgres/."""

from .store import SqlStore

__all__ = ["SqlStore"]
