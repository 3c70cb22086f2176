"""Bulk operations walk each (queue, state) holding selected jobs (of the selected queue,
if any: no index starts with the queue alone) and merge the walks: batch after batch they
must select exactly what one ordered scan of the table would, no more and no fewer, on
both engines."""

# mypy: disable-error-code="index"
from __future__ import annotations

import random

from headgate import Client, Envelope, JobFilter, State
from headgate.store.port import Store

QUEUES = ["q1", "q2", "q3", "q4"]


def _fill(store: Store) -> None:
    ids = [f"op-{i:03d}" for i in range(80)]
    random.Random(3).shuffle(ids)  # ids interleave across queues
    client = Client(store)
    client.enqueue_many([Envelope("mail" if n % 3 else "sms", b"%d" % n, id=job_id,
                                  queue=QUEUES[n % len(QUEUES)])
                         for n, job_id in enumerate(ids)])
    for queue in QUEUES[:2]:
        store.admit("w", [queue], capacity=4)  # some running jobs the cancel must reach too


def _status(store: Store, op_id: str) -> str | None:
    found = store.get_operation(op_id)
    return None if found is None else found.status


def _run(store: Store, action: str, selector: dict) -> int:
    op = store.create_operation(action, selector)
    total = 0
    while _status(store, op.id) not in ("done", "failed"):
        total += store.run_operations_batch(limit=7)  # many small batches
    assert _status(store, op.id) == "done"
    return total


def _states(store: Store) -> dict[str, str]:
    return {j.id: j.state.value for j in store.list_jobs(JobFilter(), limit=200).jobs}


def test_state_and_kind_selectors_without_a_queue_reach_every_match(store: Store) -> None:
    _fill(store)
    before = _states(store)
    running = {i for i, s in before.items() if s == "running"}
    assert len(running) == 8
    assert _run(store, "cancel", {"state": "running"}) == 8
    after = _states(store)
    assert {i for i, s in after.items() if s == State.CANCELLED.value} == running
    assert all(after[i] == before[i] for i in before if i not in running)

    sms = {j.id for j in store.list_jobs(JobFilter(kind="sms"), limit=200).jobs}
    waiting_sms = {i for i in sms if after[i] == "available"}
    assert _run(store, "cancel", {"kind": "sms"}) == len(waiting_sms)
    final = _states(store)
    assert {i for i in sms if final[i] == "cancelled"} == waiting_sms | (sms & running)


def test_a_queue_selector_reaches_every_state_of_that_queue_only(store: Store) -> None:
    _fill(store)
    before = _states(store)
    q1 = {j.id for j in store.list_jobs(JobFilter(queue="q1"), limit=200).jobs}
    assert {before[i] for i in q1} == {"available", "running"}
    assert _run(store, "cancel", {"queue": "q1"}) == len(q1)
    after = _states(store)
    assert {i for i, s in after.items() if s == "cancelled"} == q1
    assert all(after[i] == before[i] for i in before if i not in q1)
