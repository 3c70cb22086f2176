"""The fixtures the conformance tests ask for, all built from one the adapter under test
supplies: `headgate_store_url`, a URL naming a fresh, empty database that `open_store`
opens (an outside adapter's scheme added with `headgate.store.register_adapter`).

`store` is that database, migrated; `open_more` opens it again, as another process
would; `client` is a producer on `store`. Importing `headgate.testing.conformance` with
`*` puts these in the importing module, where they outrank a conftest.py's fixtures of
the same names; registering this module as a plugin offers them to other modules too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from headgate import Client, Job, open_store
from headgate.store.port import Store

from . import helpers


@pytest.fixture
def store_url(headgate_store_url: str) -> str:
    """The adapter's URL; a test that opens it in another process asks for it."""
    return headgate_store_url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """The store on `store_url`, migrated."""
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def open_more(store_url: str) -> Iterator[Callable[[], Store]]:
    """Opens extra stores on the same database (another process's view of it)."""
    opened: list[Store] = []

    def _open() -> Store:
        s = open_store(store_url, migrate=False)
        opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()


@pytest.fixture
def client(store: Store) -> Client:
    return Client(store)


@pytest.fixture
def all_jobs() -> Callable[..., list[Job]]:
    return helpers.all_jobs


@pytest.fixture
def crash() -> Callable[..., Job]:
    return helpers.lose_lease


@pytest.fixture
def quarantine() -> Callable[[Store, str, bytes], str]:
    return helpers.quarantine_fingerprint
