"""The PostgreSQL adapter: many processes and machines on one database."""

from .store import PostgresStore

__all__ = ["PostgresStore"]
