"""SQLite's query plans: what keeps the job pages, the bulk operations' batches and the
`error:` search flat as `jobs` grows is that each statement walks an index in id order,
never sorting. The statements are traced on a real SQLite file (tests/support.py) and
each one's plan is read back from the same file. The rows are those the conformance
suite's own tests page through (headgate/testing/conformance)."""

from __future__ import annotations

from typing import Any

import pytest
from support import query_plan, traced

from headgate.core import JobFilter
from headgate.testing.conformance.test_port_error_search import fail
from headgate.testing.conformance.test_port_job_pages import QUEUES
from headgate.testing.conformance.test_port_job_pages import _fill as fill_pages
from headgate.testing.conformance.test_port_operation_batches import _fill as fill_queues


def test_state_and_queue_pages_walk_an_index_newest_first(tmp_path) -> None:
    """What keeps these pages flat as `jobs` grows: each statement walks (queue, state,
    id) in id order, never sorting: a state's branches are its queues, a queue's
    branches its occupied states (with or without a filter no index serves: then each
    state's walk also has its end found along the same index); a queue with a kind
    walks (kind, id)."""
    from headgate.adapters.sqlite import SqliteStore

    path = tmp_path / "plans.db"
    store = SqliteStore(str(path))
    try:
        facts = fill_pages(store)
        pages: dict[str, list[str]] = {}
        ends: dict[str, list[str]] = {}
        for name, f in [("state", JobFilter(state="available")),
                        ("queue", JobFilter(queue="alpha")),
                        ("queue+partition", JobFilter(queue="alpha", partition_key="p")),
                        ("queue+kind", JobFilter(queue="alpha", kind="report"))]:
            with traced(store) as statements:
                store.list_jobs(f, limit=5)
            walks = [s for s in statements
                     if s.lstrip().startswith("SELECT") and "ORDER BY id" in s]
            pages[name] = [s for s in walks if "OFFSET" not in s]
            ends[name] = [s for s in walks if "OFFSET" in s]
    finally:
        store.close()
    alpha_states = {j["state"] for j in facts.values() if j["queue"] == "alpha"}
    assert len(pages["state"]) == len(QUEUES)  # every queue has some available
    assert len(alpha_states) > 1
    assert len(pages["queue"]) == len(pages["queue+partition"]) == len(alpha_states)
    assert len(pages["queue+kind"]) == 1  # one walk of the kind's (kind, id)
    assert len(ends["queue+partition"]) == len(alpha_states)
    assert not ends["state"] and not ends["queue"] and not ends["queue+kind"]
    for name in pages:
        index = "jobs_kind_id" if name == "queue+kind" else "jobs_queue_state_id"
        for sql in pages[name] + ends[name]:
            plan = query_plan(path, sql)  # an end reads the index alone (covering)
            assert f"INDEX {index}" in plan, plan
            assert "TEMP B-TREE" not in plan, plan



def test_a_state_batch_walks_the_queue_state_index(tmp_path) -> None:
    from headgate.adapters.sqlite import SqliteStore

    path = tmp_path / "ops.db"
    store = SqliteStore(str(path))
    try:
        fill_queues(store)
        op = store.create_operation("cancel", {"state": "running"})
        with traced(store) as statements:
            store.run_operations_batch(limit=7)
        found = store.get_operation(op.id)
        assert found is not None and found.status in ("running", "done")
    finally:
        store.close()
    walks = [s for s in statements if s.lstrip().startswith("SELECT id, queue FROM jobs")]
    assert len(walks) == 2  # q1 and q2 hold running jobs
    for sql in walks:
        plan = query_plan(path, sql)
        assert "INDEX jobs_queue_state_id" in plan and "TEMP B-TREE" not in plan, plan


def test_a_queue_batch_walks_the_queue_state_index(tmp_path) -> None:
    from headgate.adapters.sqlite import SqliteStore

    path = tmp_path / "ops.db"
    store = SqliteStore(str(path))
    try:
        fill_queues(store)
        store.create_operation("cancel", {"queue": "q1", "kind": "mail"})
        with traced(store) as statements:
            store.run_operations_batch(limit=7)
    finally:
        store.close()
    walks = [s for s in statements if s.lstrip().startswith("SELECT id, queue FROM jobs")]
    assert len(walks) == 2  # q1 holds available and running jobs
    for sql in walks:
        plan = query_plan(path, sql)
        assert "INDEX jobs_queue_state_id" in plan and "TEMP B-TREE" not in plan, plan



def test_the_sqlite_plan_uses_the_last_error_index(store: Any, backend: str) -> None:
    if backend != "sqlite":
        pytest.skip("SQLite's plan; PostgreSQL's planner picks by statistics")
    fail(store, "hooks", ["TimeoutError: x"])
    with store.db.read() as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE state = ? AND last_error <> '' "
            "AND last_error >= ? AND last_error < ? ORDER BY id DESC LIMIT 51",
            ("archived", "Timeout", "Timeout\U0010ffff")).fetchall()
    assert "USING INDEX jobs_last_error_id" in " ".join(str(r) for r in plan)
