"""Operator control at the port: rate classes and concurrency limits (listing, deleting
with and without force), bulk operations (dry run, batches, the finished record), queue
deletion, and the API's idempotency keys."""

from __future__ import annotations

import time

import pytest

from headgate import Client, JobFilter, Outcome, State, Store
from headgate.core import InvalidInput, InvalidTransition, NotFound
from headgate.core.records import IdempotencyRecord


def drain_operations(store: Store) -> None:
    while store.run_operations_batch(limit=3):
        pass


def test_rate_classes_are_listed_with_their_budget(store: Store) -> None:
    store.upsert_rate_class("api", 10, 1_000, burst=20)
    store.upsert_rate_class("slow", 1, 60_000, paused=True)
    classes = {c.name: c for c in store.rate_classes()}
    api, slow = classes["api"], classes["slow"]
    assert (api.limit_per_window, api.window_ms, api.burst, api.paused) == (
        10, 1_000, 20, False)
    assert api.tokens_available == pytest.approx(20, abs=0.5)  # starts full
    assert slow.paused is True and slow.jobs_waiting == 0
    store.upsert_rate_class("api", 5, 1_000)  # an upsert replaces the settings
    api = {c.name: c for c in store.rate_classes()}["api"]
    assert (api.limit_per_window, api.burst) == (5, 5)


def test_a_rate_class_with_waiting_jobs_is_deleted_only_by_force(store: Store,
                                                                 client: Client) -> None:
    store.upsert_rate_class("api", 10, 1_000)
    for i in range(2):
        client.enqueue("k", b"%d" % i, rate_class="api")
    assert store.delete_rate_class("api") == 2
    assert [c.name for c in store.rate_classes()] == ["api"]  # still there
    assert store.delete_rate_class("api", force=True) == 2
    assert store.rate_classes() == []
    # Jobs naming a missing class are admitted without a budget.
    assert len(store.admit("w", ["default"], capacity=10)) == 2
    with pytest.raises(NotFound):
        store.delete_rate_class("api")


def test_a_concurrency_limit_governing_work_is_deleted_only_by_force(store: Store,
                                                                     client: Client) -> None:
    store.upsert_concurrency_limit("one-at-a-time", "q", 1)
    (limit,) = store.concurrency_limits()
    assert (limit.name, limit.queue, limit.max_concurrent) == ("one-at-a-time", "q", 1)
    client.enqueue("k", b"1", queue="q")
    client.enqueue("k", b"2", queue="q")
    assert len(store.admit("w", ["q"], capacity=10)) == 1
    assert store.delete_concurrency_limit("one-at-a-time") == 2  # running + available
    assert len(store.concurrency_limits()) == 1
    assert store.delete_concurrency_limit("one-at-a-time", force=True) == 2
    assert store.concurrency_limits() == []
    assert len(store.admit("w", ["q"], capacity=10)) == 1  # the ceiling is gone
    with pytest.raises(NotFound):
        store.delete_concurrency_limit("one-at-a-time")
    with pytest.raises(InvalidInput):
        store.upsert_concurrency_limit("bad", "q", 1, on_saturated="explode")


def test_a_bulk_cancel_runs_in_batches_and_records_what_it_did(store: Store,
                                                               client: Client) -> None:
    ids = [client.enqueue("k", b"%d" % i, queue="bulk") for i in range(7)]
    keep = client.enqueue("k", b"other", queue="elsewhere")
    dry = store.create_operation("cancel", {"queue": "bulk"}, dry_run=True)
    assert (dry.status, dry.total_estimated, dry.dry_run) == ("done", 7, True)
    assert all(store.get_job(i).state is State.AVAILABLE for i in ids)  # type: ignore[union-attr]
    op = store.create_operation("cancel", {"queue": "bulk"})
    assert op.status == "queued" and op.affected == 0
    assert store.run_operations_batch(limit=3) == 3
    assert store.get_operation(op.id).status == "running"  # type: ignore[union-attr]
    drain_operations(store)
    finished = store.get_operation(op.id)
    assert finished is not None
    assert (finished.status, finished.affected) == ("done", 7)
    assert finished.finished_at_ms is not None
    assert {store.get_job(i).state for i in ids} == {State.CANCELLED}  # type: ignore[union-attr]
    assert store.get_job(keep).state is State.AVAILABLE  # type: ignore[union-attr]
    assert store.run_operations_batch() == 0
    assert store.get_operation("missing") is None


def test_operation_selectors_and_actions_are_checked(store: Store) -> None:
    with pytest.raises(InvalidInput):
        store.create_operation("cancel", {})  # at least one field
    with pytest.raises(InvalidInput):
        store.create_operation("explode", {"queue": "q"})
    with pytest.raises(InvalidInput):
        store.create_operation("retry", {"colour": "red"})


def test_a_bulk_retry_and_delete_by_state(store: Store, client: Client) -> None:
    ids = [client.enqueue("k", b"%d" % i, queue="q", max_attempts=1) for i in range(3)]
    for claim in store.admit("w", ["q"], capacity=3):
        store.ack(claim, Outcome.RETRY, error="boom")  # archived at once
    retry = store.create_operation("retry", {"queue": "q", "state": "archived"})
    drain_operations(store)
    assert store.get_operation(retry.id).affected == 3  # type: ignore[union-attr]
    assert {store.get_job(i).state for i in ids} == {State.AVAILABLE}  # type: ignore[union-attr]
    delete = store.create_operation("delete", {"queue": "q", "state": "available"})
    drain_operations(store)
    assert store.get_operation(delete.id).affected == 3  # type: ignore[union-attr]
    assert store.list_jobs(JobFilter(queue="q")).jobs == []


def test_an_empty_queue_is_deleted_a_busy_one_only_by_force(store: Store,
                                                            client: Client) -> None:
    client.enqueue("k", b"", queue="empty")
    (claim,) = store.admit("w", ["empty"], capacity=1)
    store.ack(claim, Outcome.SUCCESS)
    store.delete_job(claim.job.id)
    assert store.delete_queue("empty") is None
    assert "empty" not in [s.queue for s in store.queue_stats()]
    with pytest.raises(NotFound):
        store.delete_queue("empty")
    for i in range(4):
        client.enqueue("k", b"%d" % i, queue="busy")
    with pytest.raises(InvalidTransition):
        store.delete_queue("busy")
    op_id = store.delete_queue("busy", force=True)
    assert op_id is not None
    assert store.delete_queue("busy", force=True) == op_id  # one operation per queue
    (busy,) = [s for s in store.queue_stats() if s.queue == "busy"]
    assert busy.paused is True and busy.max_unfinished_jobs == 0  # intake stopped
    drain_operations(store)
    assert store.get_operation(op_id).status == "done"  # type: ignore[union-attr]
    assert "busy" not in [s.queue for s in store.queue_stats()]


def test_an_idempotency_key_is_claimed_once_then_replays(store: Store) -> None:
    assert store.idempotency_begin("tok:POST /x:k1", "hash-a") is None  # claimed
    in_flight = store.idempotency_begin("tok:POST /x:k1", "hash-a")
    assert in_flight is not None and in_flight.state == "in_progress"
    store.idempotency_complete("tok:POST /x:k1", 201, {"Location": "/x/1"}, b'{"id":1}')
    done = store.idempotency_begin("tok:POST /x:k1", "hash-b")
    assert done is not None
    assert done == IdempotencyRecord("hash-a", "done", 201, {"Location": "/x/1"}, b'{"id":1}')
    store.idempotency_abort("tok:POST /x:k1")  # a finished key is not dropped by abort
    assert store.idempotency_begin("tok:POST /x:k1", "hash-a").state == "done"  # type: ignore[union-attr]


def test_an_aborted_key_can_be_claimed_again_and_an_expired_one_is_free(store: Store) -> None:
    assert store.idempotency_begin("k2", "h") is None
    store.idempotency_abort("k2")
    assert store.idempotency_begin("k2", "h") is None
    assert store.idempotency_begin("k3", "h", ttl_ms=1) is None
    store.idempotency_complete("k3", 200, {}, b"")
    now = store.now_ms()
    while store.now_ms() <= now + 2:
        time.sleep(0.005)
    assert store.idempotency_begin("k3", "h") is None  # past its ttl: claimed afresh
