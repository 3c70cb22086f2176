"""Job pages that merge branches (a state alone over its queues, a kind prefix over its
kinds) list exactly what one query over the whole table would, in the same order, page
after page, on both engines. That each page is an index walk, never a sort, is
SQLite's promise (tests/store/test_sqlite_plans.py)."""

# mypy: disable-error-code="operator"
from __future__ import annotations

import random
import time

import pytest

from headgate import Client, Envelope
from headgate.core import AckRequest, JobFilter, Outcome
from headgate.store.port import Store

QUEUES = ["alpha", "beta", "gamma", "delta", "omega"]
KINDS = ["send_mail", "send_sms", "sendmail", "report"]


def _fill(store: Store) -> dict[str, dict]:
    """~120 jobs whose ids interleave across queues, in four states; returns each job's
    facts by id, read back from the store."""
    rng = random.Random(7)
    ids = [f"job-{i:04d}" for i in range(120)]
    rng.shuffle(ids)  # arrival order differs from id order
    client = Client(store)
    for n, job_id in enumerate(ids):
        later = int(time.time() * 1000) + 3_600_000 if n % 7 == 0 else 0
        client.enqueue_many([Envelope(
            KINDS[n % len(KINDS)], b"%d" % n, id=job_id, queue=QUEUES[n % len(QUEUES)],
            tags=["even"] if n % 2 == 0 else [], scheduled_at_ms=later,
        )])
    for queue in QUEUES[:3]:
        claims = store.admit("w", [queue], capacity=12)
        store.ack_many([AckRequest(c, Outcome.SUCCESS) for c in claims[:5]])
        store.ack_many([AckRequest(c, Outcome.RETRY, error="x", delay_ms=60_000)
                        for c in claims[5:7]])
    everything = store.list_jobs(JobFilter(), limit=200).jobs
    assert len(everything) == 120
    return {j.id: {"queue": j.queue, "state": j.state.value, "kind": j.kind,
                   "tags": j.tags} for j in everything}


def _walk(store: Store, f: JobFilter, limit: int) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = store.list_jobs(f, cursor=cursor, limit=limit)
        assert len(page.jobs) <= limit
        seen += [j.id for j in page.jobs]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


@pytest.mark.parametrize("limit", [1, 4, 50])
def test_branch_merged_pages_equal_one_ordered_scan(store: Store, limit: int) -> None:
    facts = _fill(store)
    states = {fact["state"] for fact in facts.values()}
    assert {"available", "running", "completed", "retryable", "scheduled"} <= states
    cases: list[tuple[JobFilter, object]] = []
    for state in sorted(states):
        cases.append((JobFilter(state=state), lambda j, s=state: j["state"] == s))
        cases.append((JobFilter(state=state, kind_prefix="send_"),
                      lambda j, s=state: j["state"] == s and j["kind"].startswith("send_")))
        cases.append((JobFilter(state=state, tags_any=["even"]),
                      lambda j, s=state: j["state"] == s and "even" in j["tags"]))
    for queue in QUEUES + ["nowhere"]:
        cases.append((JobFilter(queue=queue), lambda j, q=queue: j["queue"] == q))
        cases.append((JobFilter(queue=queue, tags_all=["even"]),
                      lambda j, q=queue: j["queue"] == q and "even" in j["tags"]))
        cases.append((JobFilter(queue=queue, kind="report"),
                      lambda j, q=queue: j["queue"] == q and j["kind"] == "report"))
    cases.append((JobFilter(kind_prefix="send_"), lambda j: j["kind"].startswith("send_")))
    cases.append((JobFilter(kind_prefix="send"), lambda j: j["kind"].startswith("send")))
    for f, wanted in cases:
        expected = sorted((i for i, j in facts.items() if wanted(j)), reverse=True)
        assert _walk(store, f, limit) == expected, f
