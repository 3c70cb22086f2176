"""docs/tasks.md stays in step with the code: every option @app.task, .options() and
@app.periodic accept has a row, with the default the code has; the retry span it
states is the one the default backoff gives; its job-state table has every stored
state, the right terminal column and every event that leads into the state; the
Django backend's default attempts are the ones it documents; every TestSession method
is described. A new option, state or default without a doc line fails here."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path
from typing import Any, get_overloads

import pytest

import headgate
from headgate.core import STORED_STATES, TERMINAL, Envelope
from headgate.core import backoff as store_backoff
from headgate.core.schema_constants import DEFAULT_RETENTION_MS
from headgate.tasks import App, Backoff, TestSession
from headgate.tasks.app import _DEFAULTS, SCHEDULE_KEYS
from headgate.tasks.task import CALL_OPTIONS, TASK_DEFAULTS

DOC = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"
TRANSITIONS = Path(headgate.__file__).resolve().parent / "core" / "transitions.json"
_NO_DEFAULT: Any = object()


def doc() -> str:
    return DOC.read_text()


def section(title: str) -> str:
    """The text under the heading ``## <title>`` up to the next ``## `` heading."""
    text = doc()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def table(text: str) -> dict[str, list[str]]:
    """``{first cell without backticks: [other cells]}`` for each table row whose first
    cell is one `code` name."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = [c.strip() for c in match.group(2).split("|")]
    return rows


def shown(value: Any) -> str:
    """A default as the doc writes it: the Python literal, double-quoted."""
    if isinstance(value, dict) and not value:
        return "{}"
    return repr(value).replace("'", '"')


def envelope_default(name: str) -> Any:
    field = next(f for f in dataclasses.fields(Envelope) if f.name == name)
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return _NO_DEFAULT


def task_option_defaults() -> dict[str, Any]:
    """Every option @app.task takes, with its default: the typed overload's keyword
    parameters, and the envelope fields a task may default."""
    options: dict[str, Any] = {}
    for overload in get_overloads(App.task):
        for p in inspect.signature(overload).parameters.values():
            if p.kind is p.KEYWORD_ONLY:
                options[p.name] = p.default
    for name in TASK_DEFAULTS:
        options.setdefault(name, envelope_default(name))
    return options


def assert_rows(rows: dict[str, list[str]], expected: dict[str, Any], where: str) -> None:
    assert set(rows) == set(expected), (
        f"{where}: documented but not accepted {sorted(set(rows) - set(expected))}, "
        f"accepted but not documented {sorted(set(expected) - set(rows))}")
    for name, default in expected.items():
        cell = rows[name][0].replace("`", "")
        assert cell, f"{where}: {name} has no default"
        if default is Ellipsis or default is _NO_DEFAULT:
            continue  # a sentinel (retry: the store's backoff) or required: described
        assert cell.startswith(shown(default)), \
            f"{where}: {name} default is {shown(default)}, the doc says {cell!r}"


def test_every_app_task_option_is_documented_with_its_default() -> None:
    expected = task_option_defaults()
    assert {"retry", "retry_on", "timeout_ms", "deadline_ms", "codec", "name",
            "partition"} <= set(expected)
    assert_rows(table(section("`@app.task` options")), expected, "@app.task")


def test_every_per_call_option_is_documented_with_its_default() -> None:
    rows = table(section("`.options()` per call"))
    per_call = CALL_OPTIONS - TASK_DEFAULTS
    expected = {n: (None if n in ("delay_ms", "conn") else envelope_default(n))
                for n in per_call}
    assert_rows(rows, expected, ".options()")
    # The rest are the @app.task rows, named in the paragraph under the table.
    text = section("`.options()` per call")
    for name in TASK_DEFAULTS:
        assert f"`{name}`" in text, f".options() does not mention {name}"


def test_every_periodic_option_and_schedule_field_is_documented() -> None:
    rows = table(section("`@app.periodic` options"))
    params = {p.name: (p.default if p.default is not p.empty else _NO_DEFAULT)
              for p in inspect.signature(App.periodic).parameters.values()
              if p.name != "self" and p.kind is not p.VAR_KEYWORD}
    carried = [k for k in SCHEDULE_KEYS
               if k not in ("kind", "payload", "spec", "on_missed", "backfill_limit")]
    expected = {**params, **{k: _DEFAULTS[k] for k in carried}}
    assert_rows(rows, expected, "@app.periodic")
    assert _DEFAULTS["retention_ms"] == 0 and "**`0`, not 24 h**" in rows["retention_ms"][2]


def test_backoff_defaults_and_the_default_schedules_span() -> None:
    rows = table(section("Retries and backoff"))
    for field in dataclasses.fields(Backoff):
        assert rows[field.name][0].replace("`", "") == shown(field.default)
    # Backoff() and the store's default backoff are the same schedule.
    assert (Backoff().base_ms, Backoff().max_ms) == (store_backoff.BASE_MS,
                                                     store_backoff.CAP_MS)
    attempts = envelope_default("max_attempts")
    waits_ms = [min(store_backoff.CAP_MS, store_backoff.BASE_MS * 2 ** (n - 1))
                for n in range(1, attempts)]
    total_s = sum(waits_ms) / 1000

    def stated(seconds: float) -> str:
        s = round(seconds)
        return f"{s:,} s ({s // 3600} h {s % 3600 // 60} min {s % 60} s)"

    text = " ".join(section("Retries and backoff").split())
    assert f"runs {attempts} times, with {attempts - 1} waits" in text
    assert stated(total_s) in text, stated(total_s)
    assert stated(total_s * 0.75) in text and stated(total_s * 1.25) in text
    assert f"`BASE_MS = {store_backoff.BASE_MS:_}`" in text
    assert f"`CAP_MS = {store_backoff.CAP_MS:_}`" in text


def test_the_retention_default_is_the_stores() -> None:
    text = " ".join(section("Results and their retention").split())
    assert f"{DEFAULT_RETENTION_MS:,} ms (24 h" in text
    assert envelope_default("retention_ms") is None  # None: the store's default


def test_the_job_state_table_follows_the_transition_table() -> None:
    rows = table(section("Job states"))
    assert set(rows) == {s.value for s in STORED_STATES}
    for state in STORED_STATES:
        terminal, meaning, how = rows[state.value]
        assert terminal == ("yes" if state in TERMINAL else "no"), state
    events_into: dict[str, set[str]] = {}
    for row in json.loads(TRANSITIONS.read_text())["transitions"]:
        events_into.setdefault(row["to"], set()).add(row["on"])
    for target, events in events_into.items():
        where = section("Job states") if target == "deleted" else rows[target][2]
        for event in events:
            assert f"`{event}`" in where, f"{target}: event {event} not named"
    archived = rows["archived"][1].lower()
    assert "failed" in archived and "dead-letter" in archived


def test_the_django_backends_default_attempts_are_documented() -> None:
    pytest.importorskip("django")
    from headgate.contrib.django.backend import DEFAULT_MAX_ATTEMPTS, HeadgateBackend

    backend = HeadgateBackend("default", {
        "BACKEND": "headgate.contrib.django.HeadgateBackend",
        "OPTIONS": {"URL": "sqlite:///unused.db"}})
    assert backend.max_attempts == DEFAULT_MAX_ATTEMPTS == 1
    line = next(x for x in section("The Django backend beside the App").splitlines()
                if x.startswith("| attempts |"))
    assert f"default **`{DEFAULT_MAX_ATTEMPTS}`**" in line
    assert f"default **`{envelope_default('max_attempts')}`**" in line
    assert "MAX_ATTEMPTS" in (inspect.getdoc(inspect.getmodule(HeadgateBackend)) or "")


def test_every_testing_session_method_is_described() -> None:
    text = section("Testing with `app.testing()`")
    methods = [name for name, value in vars(TestSession).items()
               if not name.startswith("_") and callable(value)]
    assert {"run_all", "advance", "now_ms", "jobs"} <= set(methods)
    for name in methods:
        assert f"t.{name}(" in text, f"TestSession.{name} is not described"
    assert "t.store" in text and "fast_forward=True" in text
    advance = inspect.signature(TestSession.advance).parameters
    for name in (p for p in advance if p != "self"):
        assert f"{name}=0" in text, f"advance({name}=) is not described"


def test_the_testing_sections_examples_pass() -> None:
    """Its python blocks run as written, on an app with the intro's send_email task, and
    the test functions they define pass (the flaky one through t.advance)."""
    blocks = re.findall(r"```python\n(.*?)```", section("Testing with `app.testing()`"), re.S)
    assert len(blocks) >= 2
    app = headgate.App()

    @app.task(name="docs.send_email")
    def send_email(to: str, subject: str) -> dict[str, str]:
        return {"to": to, "status": "sent"}

    namespace: dict[str, Any] = {"__name__": "docs_tasks_example", "headgate": headgate,
                                 "app": app, "send_email": send_email}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the doc's code
    tests = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    assert len(tests) >= 2
    for test in tests:
        test()
    assert namespace["calls"] == [1, 1]
