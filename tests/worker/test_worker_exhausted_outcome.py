"""A failed attempt with no attempts left is reported as what it is: the job is
archived (the dead-letter state). A real `headgate worker` process's text log line and
its JSON log's `outcome` say `archived`, not `retry`, and name no retry delay (none
follows). The OpenTelemetry span's `headgate.job.outcome` is covered in
tests/integrations/test_otel.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from integration_support import worker
from support import wait_for

import headgate
from headgate.tasks import JSON

APP = '''
import headgate

app = headgate.App()


@app.task(name="exhaust.fail", queue="exhaust",
          retry=headgate.Backoff(base_ms=200, max_ms=200, jitter=0))
def fail() -> None:
    raise ValueError("boom")
'''


def enqueue(store_url: str, max_attempts: int) -> str:
    store = headgate.open_store(store_url)
    try:
        return headgate.Client(store).enqueue(
            "exhaust.fail", JSON.encode_args((), {}), queue="exhaust",
            max_attempts=max_attempts)
    finally:
        store.close()


def outcome_lines(err: Path, job_id: str) -> list[str]:
    return [line for line in err.read_text().splitlines()
            if job_id in line and " run " in line]


def test_the_text_line_of_a_last_failed_attempt_says_archived(
        store_url: str, tmp_path: Path) -> None:
    (tmp_path / "exhaust_app.py").write_text(APP)
    last = enqueue(store_url, max_attempts=1)
    with worker(store_url, tmp_path, app="exhaust_app:app", cwd=tmp_path) as (_, err):
        wait_for(lambda: outcome_lines(err, last), 30, "the outcome line")
    (line,) = outcome_lines(err, last)
    assert ": archived in " in line, line
    assert "ValueError: boom" in line and "attempts exhausted: 1 of 1" in line, line
    assert "retry" not in line and "delay" not in line, line
    store = headgate.open_store(store_url)
    try:
        assert store.get_job(last).state is headgate.State.ARCHIVED
    finally:
        store.close()


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_the_json_outcome_of_a_last_failed_attempt_is_archived(
        store_url: str, tmp_path: Path, max_attempts: int) -> None:
    (tmp_path / "exhaust_app.py").write_text(APP)
    job_id = enqueue(store_url, max_attempts=max_attempts)
    with worker(store_url, tmp_path, "--log-format", "json", app="exhaust_app:app",
                cwd=tmp_path) as (_, err):
        def records() -> list[dict[str, object]]:
            lines = [json.loads(line) for line in err.read_text().splitlines() if line]
            return [r for r in lines if r.get("job_id") == job_id and "outcome" in r]

        wait_for(lambda: len(records()) == max_attempts, 30, "every outcome line")
    outcomes = [(r["attempt"], r["outcome"]) for r in records()]
    expected = [(1, "retry"), (2, "archived")] if max_attempts == 2 else [(1, "archived")]
    assert outcomes == expected
    last = records()[-1]
    assert "delay" not in str(last["message"]) and "retry" not in str(last["message"])
    if max_attempts == 2:
        assert "(delay 200 ms)" in str(records()[0]["message"])  # a retry still says when
