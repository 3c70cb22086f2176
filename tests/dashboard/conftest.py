"""The console tests' fixtures: one SQLite file, its store, the console app on it and
Flask's test client. They replace tests/conftest.py's `store` and `client` (both
engines; a producer Client) in this folder; a module that runs on both engines names
its store itself (test_dashboard_adaptive.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import flask
import pytest
from support import console_app, stop_app

import headgate


@pytest.fixture
def db(tmp_path: Any) -> str:
    return str(tmp_path / "console.db")


@pytest.fixture
def store(db: str) -> Iterator[Any]:
    s = headgate.open_store(f"sqlite:///{db}")
    yield s
    s.close()


@pytest.fixture
def app(store: Any, db: str) -> Iterator[flask.Flask]:
    app = console_app(store, db)
    yield app
    stop_app(app)


@pytest.fixture
def client(app: flask.Flask) -> Any:
    return app.test_client()
