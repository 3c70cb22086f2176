"""Structured logs: `headgate worker --log-format json` (and
HG_LOG_FORMAT) writes one JSON object per line, a job's lines carrying job_id, kind,
queue, attempt and worker_id as fields of their own."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from integration_support import serve, worker
from support import wait_for


@pytest.fixture
def integrations_app(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """integrations_app imported afresh, its App on `store_url`; the store the App opens
    is closed after the test, before the database is dropped (left open, a result wait's
    LISTEN thread on PostgreSQL retried its connection to the dropped database for the
    rest of the run)."""
    monkeypatch.setenv("HG_INTEGRATION_URL", store_url)
    monkeypatch.delenv("HG_INTEGRATION_TOKEN", raising=False)
    monkeypatch.delitem(sys.modules, "integrations_app", raising=False)
    mod = importlib.import_module("integrations_app")
    try:
        yield mod
    finally:
        mod.app.close()


def json_lines(path: Path) -> list[dict[str, Any]]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is JSON, or this fails


@pytest.mark.parametrize("how", ["flag", "env"])
def test_worker_json_logs_carry_the_attempt_fields(
        store_url: str, integrations_app: ModuleType, tmp_path: Path, how: str) -> None:
    mod = integrations_app
    ref = mod.chatty.enqueue("hello")
    args, env = (["--log-format", "json"], {}) if how == "flag" else \
        ([], {"HG_LOG_FORMAT": "json", "HG_LOG_LEVEL": "INFO"})
    with worker(store_url, tmp_path, "--worker-id", "w-json", *args, env=env) as (proc, err):
        assert ref.result(timeout=30) == "HELLO"
        wait_for(lambda: "in " in err.read_text() and "success" in err.read_text(), 10,
                 "the outcome line")
    lines = json_lines(err)
    said = [r for r in lines if r["logger"] == "integrations_app"]
    assert len(said) == 1, lines
    record = said[0]
    assert record["message"] == "saying hello"  # the fields are not in the text
    assert record["level"] == "INFO"
    assert {k: record[k] for k in ("job_id", "kind", "queue", "attempt", "worker_id")} == {
        "job_id": ref.id, "kind": "integrations_app.chatty", "queue": "integration",
        "attempt": 1, "worker_id": "w-json"}
    outcome = [r for r in lines if r.get("job_id") == ref.id and r.get("outcome")]
    assert outcome and outcome[0]["outcome"] == "success"
    assert outcome[0]["worker_id"] == "w-json"
    # Lines outside an attempt have no job fields.
    start = [r for r in lines if "starting" in r["message"]]
    assert start and "job_id" not in start[0]


def test_text_is_the_default_and_serve_takes_json_too(
        store_url: str, tmp_path: Path) -> None:
    if not store_url.startswith("sqlite"):
        pytest.skip("the format does not depend on the store")
    with serve(store_url, tmp_path, env={"HG_LOG_FORMAT": "json"}):
        pass
    logs = sorted(tmp_path.glob("serve-*.log"))[-1].read_text().splitlines()
    headgate_lines = [json.loads(line) for line in logs if line.startswith("{")]
    assert any(r["logger"].startswith("headgate") for r in headgate_lines), logs
    with worker(store_url, tmp_path) as (proc, err):
        wait_for(lambda: "starting" in err.read_text(), 20, "the worker's start line")
    first = err.read_text().splitlines()[0]
    assert not first.startswith("{") and " INFO headgate" in first
