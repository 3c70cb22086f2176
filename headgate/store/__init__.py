"""The store port and the factory that opens a store from a URL (through the adapter
table of registry.py, so this module names no driver)."""

from __future__ import annotations

from headgate.core import StoreUnavailable

from .activity import ActivityHub
from .capabilities import Capabilities
from .port import Admission, Control, Inspection, Maintenance, Producer, Store, StoreBasics
from .registry import UnknownStoreScheme, known_schemes, opener_for, register_adapter

MIGRATE_HINT = "run `headgate migrate`"


class SchemaMismatch(StoreUnavailable):
    """The database's schema is not the one this code was written for. Raised when the
    store opens, so a process refuses to start instead of failing on its first query
    (or, with a newer schema, writing rows a newer release would misread)."""


def open_store(url: str, *, migrate: bool = True, **options: object) -> Store:
    """`sqlite:///path.db` (or a bare path), `postgresql://…`, or a scheme another
    package registered (`register_adapter`); UnknownStoreScheme for any other.

    With ``migrate`` the pending migrations are applied; without it a schema that is
    behind the code is refused (SchemaMismatch naming `headgate migrate`). A schema
    newer than the code is refused either way. Either check also opens the database,
    so an unusable one fails here (StoreUnavailable), not at the first call."""
    store, schema, known = opener_for(url)(url, **options)
    try:
        _check_schema(schema.applied_versions(), set(known), migrate)
        if not migrate:
            _check_functions(schema.stale_functions())
        if migrate:
            schema.migrate()
    except BaseException:
        store.close()
        raise
    return store


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


__all__ = ["ActivityHub", "Admission", "Capabilities", "Control", "Inspection", "Maintenance",
           "Producer", "SchemaMismatch", "Store", "StoreBasics", "UnknownStoreScheme",
           "known_schemes", "open_store", "register_adapter"]
