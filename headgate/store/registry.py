"""Which adapter opens a store URL: one table from a URL's scheme to its adapter.

The built-in adapters are named by module path, as strings, and only the one a URL
names is imported: psycopg (an optional extra) loads for a postgresql:// URL and never
for SQLite. An adapter outside this package adds its scheme with `register_adapter`,
or by declaring an entry point in the `headgate.stores` group named after the scheme
(`memfile = mypkg.store:open_memfile`): a URL naming a scheme nobody registered looks
there, so every interpreter that has the package installed (a worker, a spawned
child, `headgate serve`) opens its URLs without importing it first. `open_store` opens
them like the built-in ones: the port knows no driver.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from headgate.core import InvalidInput, MissingExtra

from .port import Store


class SchemaState(Protocol):
    """A database's migrations as `open_store` checks them before handing a store out."""

    def applied_versions(self) -> set[int]: ...

    def stale_functions(self) -> list[str]: ...

    def migrate(self) -> object: ...


class Opened(NamedTuple):
    """What an adapter's opener gives back: the store, not migrated yet; its database's
    migrations; the migration numbers this code ships for that engine."""

    store: Store
    schema: SchemaState
    known_versions: frozenset[int]


# opener(url, **options): the store `url` names, opened without migrating.
Opener = Callable[..., Opened]


class UnknownStoreScheme(InvalidInput):
    """A store URL whose scheme no adapter registered."""

    def __init__(self, scheme: str, known: tuple[str, ...]) -> None:
        super().__init__(f"no store adapter for {scheme}:// URLs (known: "
                         f"{', '.join(s + '://' for s in known)})")
        self.scheme = scheme
        self.known = known


@dataclass(frozen=True)
class Adapter:
    """One table row. `opener` is the function, or "module:function" imported when a
    URL first names it. `requires` are the modules an optional extra brings (`extra`,
    `label` for the error that names it): imported first, so their absence is one
    MissingExtra, not an ImportError from inside the adapter."""

    opener: Opener | str
    requires: tuple[str, ...] = ()
    extra: str | None = None
    label: str | None = None

    def load(self) -> Opener:
        for module in self.requires:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise MissingExtra(self.extra or module, self.label or module,
                                   str(exc)) from exc
        if not isinstance(self.opener, str):
            return self.opener
        module, _, name = self.opener.partition(":")
        opener: Opener = getattr(importlib.import_module(module), name)
        return opener


_POSTGRES = Adapter("headgate.adapters.postgres.opener:open_postgres",
                    requires=("psycopg", "psycopg_pool"), extra="postgres", label="PostgreSQL")
_ADAPTERS: dict[str, Adapter] = {
    "sqlite": Adapter("headgate.adapters.sqlite.opener:open_sqlite"),
    "postgresql": _POSTGRES,
    "postgres": _POSTGRES,
}
_LOCK = threading.Lock()
# A scheme as RFC 3986 spells it, then "://": anything else is a SQLite file's path.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
DEFAULT_SCHEME = "sqlite"


def register_adapter(scheme: str, opener: Opener | str, *, requires: tuple[str, ...] = (),
                     extra: str | None = None, label: str | None = None) -> None:
    """Open `scheme://…` URLs with `opener` (a function, or "module:function" imported
    on first use). A scheme is registered once: InvalidInput when it already is."""
    key = scheme.lower()
    if not re.fullmatch(r"[a-z][a-z0-9+.-]*", key):
        raise InvalidInput(f"{scheme!r} is not a URL scheme")
    with _LOCK:
        if key in _ADAPTERS:
            raise InvalidInput(f"store URL scheme {key}:// is already registered")
        _ADAPTERS[key] = Adapter(opener, requires, extra, label)


def known_schemes() -> tuple[str, ...]:
    with _LOCK:
        return tuple(sorted(_ADAPTERS))


def scheme_of(url: str) -> str:
    """The URL's scheme, lower case; a string without one is a SQLite file's path."""
    m = _SCHEME.match(url)
    return m.group(1).lower() if m else DEFAULT_SCHEME


ENTRY_POINT_GROUP = "headgate.stores"


def _from_entry_point(scheme: str) -> Adapter | None:
    """The installed `headgate.stores` entry point named `scheme`, registered as its
    adapter (one import of the distributions' metadata, only for unknown schemes)."""
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
             if ep.name.lower() == scheme]
    if not found:
        return None
    values = sorted({ep.value for ep in found})
    if len(values) > 1:
        raise InvalidInput(f"store URL scheme {scheme}:// is declared by more than one "
                           f"installed package ({', '.join(values)})")
    with _LOCK:
        return _ADAPTERS.setdefault(scheme, Adapter(values[0]))


def opener_for(url: str) -> Opener:
    """The opener of `url`'s adapter (imported now if named by string), registered or
    declared by an installed entry point; UnknownStoreScheme naming the known schemes
    when neither."""
    scheme = scheme_of(url)
    with _LOCK:
        adapter = _ADAPTERS.get(scheme)
    if adapter is None:
        adapter = _from_entry_point(scheme)
    if adapter is None:
        raise UnknownStoreScheme(scheme, known_schemes())
    return adapter.load()


__all__ = ["ENTRY_POINT_GROUP", "Adapter", "Opened", "Opener", "SchemaState",
           "UnknownStoreScheme", "known_schemes", "opener_for", "register_adapter",
           "scheme_of"]
