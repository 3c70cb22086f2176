"""The store port and the factory that picks an adapter from a URL."""

from __future__ import annotations

from typing import Any

from headgate.core import MissingExtra, StoreUnavailable

from .activity import ActivityHub
from .port import Store

MIGRATE_HINT = "run `headgate migrate`"


class SchemaMismatch(StoreUnavailable):
    """The database's schema is not the one this code was written for. Raised when the
    store opens, so a process refuses to start instead of failing on its first query
    (or, with a newer schema, writing rows a newer release would misread)."""


def open_store(url: str, *, migrate: bool = True, **options: object) -> Store:
    """`sqlite:///path.db` (or a bare path) or `postgresql://…`.

    With ``migrate`` the pending migrations are applied; without it a schema that is
    behind the code is refused (SchemaMismatch naming `headgate migrate`). A schema
    newer than the code is refused either way. Either check also opens the database,
    so an unusable one fails here (StoreUnavailable), not at the first call."""
    if url.startswith(("postgresql://", "postgres://")):
        _require_postgres_extra()
        from headgate.adapters.postgres import PostgresStore
        from headgate.adapters.postgres.connection import known_versions

        _probe_postgres(url)
        store: Any = PostgresStore(url, migrate=False, **options)  # type: ignore[arg-type]
    else:
        from headgate.adapters.sqlite import SqliteStore
        from headgate.adapters.sqlite.connection import known_versions

        path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
        if url.startswith("sqlite://") and not url.startswith("sqlite:///"):
            raise ValueError("sqlite URLs look like sqlite:///path/to/file.db")
        store = SqliteStore(path, migrate=False, **options)  # type: ignore[arg-type]
    try:
        _check_schema(store.db.applied_versions(), known_versions(), migrate)
        if not migrate:
            _check_functions(store.db.stale_functions())
        if migrate:
            store.db.migrate()
    except BaseException:
        store.close()
        raise
    return store


def _require_postgres_extra() -> None:
    """psycopg and its pool come with the ``headgate-queue[postgres]`` extra; without them
    (or with a psycopg that finds no libpq) a PostgreSQL URL is one MissingExtra naming it."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise MissingExtra("postgres", "PostgreSQL", str(exc)) from exc


def _probe_postgres(url: str) -> None:
    """One direct connection first: through the pool, an unreachable server costs the
    pool's whole timeout (10 s) and a warning per reconnection attempt."""
    import psycopg

    from headgate.adapters.postgres.outage import CONNECT_TIMEOUT_S, unavailable

    try:
        psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg.Error as exc:
        raise unavailable(exc) from exc


def _check_schema(applied: set[int], known: set[int], migrate: bool) -> None:
    newest = max(known, default=0)
    if applied and max(applied) > newest:
        raise SchemaMismatch(
            f"store unavailable: the database schema is at version {max(applied)}, newer "
            f"than this headgate knows ({newest}); upgrade headgate to use it")
    missing = sorted(known - applied)
    if migrate or not missing:
        return
    if not applied:
        raise SchemaMismatch(
            f"store unavailable: the database has no headgate schema and migrations are "
            f"off; {MIGRATE_HINT} first")
    raise SchemaMismatch(
        f"store unavailable: the database schema is behind this headgate (version "
        f"{max(applied)}, missing migration{'s' if len(missing) > 1 else ''} "
        f"{', '.join(map(str, missing))}) and migrations are off; {MIGRATE_HINT} first")


def _check_functions(stale: list[str]) -> None:
    if stale:
        raise SchemaMismatch(
            f"store unavailable: the database's server functions are behind this headgate "
            f"({', '.join(stale)}) and migrations are off; {MIGRATE_HINT} first")


__all__ = ["ActivityHub", "SchemaMismatch", "Store", "open_store"]
