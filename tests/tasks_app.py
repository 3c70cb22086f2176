"""The task app the task-layer tests run in real worker processes
(`headgate worker --app tasks_app:app`) and produce to from the test process.

Side effects go to files in HG_TEST_DIR, so a test reads what ran where."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import headgate

app = headgate.App()


def _note(name: str, text: str) -> None:
    with (Path(os.environ["HG_TEST_DIR"]) / name).open("a") as f:
        f.write(text + "\n")


@app.task(queue="tasks")
def add(a: int, b: int) -> int:
    return a + b


@app.task(queue="tasks", name="tasks.describe")
def describe(name: str, *, tags: list[str]) -> dict[str, Any]:
    return {"name": name, "tags": sorted(tags)}


@app.task(queue="tasks", max_attempts=3,
          retry=headgate.Backoff(base_ms=50, max_ms=50, jitter=0))
def always_fails(label: str) -> None:
    _note(f"fails-{label}", "ran")
    raise ValueError(f"broken {label}")


@app.task(queue="tasks", max_attempts=5, retry_on=(KeyError,),
          retry=lambda failures: 10 * failures)
def picky(error: str) -> None:
    if error == "key":
        raise KeyError("retry me")
    raise TypeError("do not retry me")


@app.task(queue="mw")
def traced(label: str) -> str:
    _note("middleware", f"task {label}")
    if label == "bad":
        raise RuntimeError("task failed")
    return label.upper()


@app.middleware
def outer(run: Any, call_next: Any) -> Any:
    if run.task is not traced:
        return call_next()
    _note("middleware", "outer in")
    try:
        value = call_next()
    except Exception as exc:
        _note("middleware", f"outer saw {type(exc).__name__}")
        raise
    _note("middleware", f"outer saw {value}")
    return value


@app.middleware
def inner(run: Any, call_next: Any) -> Any:
    if run.task is not traced:
        return call_next()
    _note("middleware", "inner in")
    try:
        return call_next()
    finally:
        _note("middleware", "inner out")


@app.periodic("@every:300", queue="tasks", id="tasks-heartbeat")
def heartbeat() -> None:
    _note("heartbeat", "tick")
