"""The store conformance suite (headgate/testing/conformance) on both built-in engines,
through the entry point an outside adapter uses: the star import brings the tests and
the fixtures they ask for, and `headgate_store_url` names a fresh database per test,
parametrized over the engines as tests/conftest.py's `store_url` is (every test here
migrates it through the suite's `store` first, so on PostgreSQL it is a copy of the
session's migrated template, as there). The imported fixtures outrank that conftest's
`store`, `client` and the rest within this module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import fresh_pg_database, pg_available

from headgate.testing.conformance import *  # noqa: F403


@pytest.fixture(params=["sqlite", "pg"])
def headgate_store_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/hg.db"
        return
    if not pg_available():
        pytest.skip("postgres adapter not available")
    yield from fresh_pg_database(request)
