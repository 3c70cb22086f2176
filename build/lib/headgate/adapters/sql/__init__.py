"""The store port implemented once, in SQL both engines share (see dialect.py)."""

from .store import SqlStore

__all__ = ["SqlStore"]
