"""`error:` in the job search: the first line of each job's last error, kept in
jobs.last_error by a trigger (migration 0012) and searched as a prefix range over
jobs_last_error_id, on both backends."""

from __future__ import annotations

from typing import Any

import pytest

import headgate
from headgate.core import InvalidInput, JobFilter, Outcome
from headgate.core.job_search import parse_search


def fail(store: Any, queue: str, errors: list[str]) -> str:
    """A job that really failed len(errors) attempts with these errors, in order."""
    job_id = headgate.Client(store).enqueue("k", b"{}", queue=queue, max_attempts=len(errors))
    for error in errors:
        [claim] = store.admit("w", [queue], capacity=1, lease_ms=60_000)
        assert claim.job.id == job_id
        store.ack(claim, Outcome.RETRY, error=error)
        store.reschedule_job(job_id, 0) if store.get_job(job_id).state.value == "retryable" \
            else None
    return job_id


def search(store: Any, q: str, **kw: Any) -> list[str]:
    f = JobFilter(**kw)
    parse_search(q, f)
    return [j.id for j in store.list_jobs(f, limit=50).jobs]


def test_error_search_finds_jobs_by_their_last_error(store: Any) -> None:
    timeout = fail(store, "hooks", ["ValueError: bad", "TimeoutError: webhook did not answer"
                                    "\n  hooks.py:12 in deliver"])
    smtp = fail(store, "mail", ["ConnectionRefusedError: [Errno 111] smtp.example:25"])
    earlier = fail(store, "mail", ["TimeoutError: first", "KeyError: 'customer_id'"])
    headgate.Client(store).enqueue("k", b"{}", queue="mail")  # never failed
    assert search(store, "error:Timeout") == [timeout]  # the last error only
    assert search(store, "error:TimeoutError: webhook") == []  # one word: a space splits
    assert search(store, "error:Connection") == [smtp]
    assert search(store, "error:KeyError", state="archived") == [earlier]
    assert search(store, "error:timeout") == []  # as written
    assert search(store, "error:%") == [] and search(store, "error:_") == []  # no patterns
    with pytest.raises(InvalidInput):
        search(store, "error:")
