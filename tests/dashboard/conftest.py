"""The console's fixtures: a real SQLite file, its store, and the Flask app over it
without background threads (each test drives what it needs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import headgate
from headgate.config import Settings
from headgate.web import create_app


@pytest.fixture
def db(tmp_path: Any) -> str:
    return str(tmp_path / "console.db")


@pytest.fixture
def store(db: str) -> Iterator[Any]:
    s = headgate.open_store(f"sqlite:///{db}")
    yield s
    s.close()


@pytest.fixture
def app(store: Any, db: str) -> Any:
    app = create_app(store, config=Settings(sqlite_path=db), background=False)
    app.config["TESTING"] = True
    return app


@pytest.fixture
def client(app: Any) -> Any:
    return app.test_client()
