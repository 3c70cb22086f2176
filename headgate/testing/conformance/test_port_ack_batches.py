"""Batched acknowledgements: one transaction, lost leases reported per job."""

# mypy: disable-error-code="union-attr,arg-type,return-value"
from __future__ import annotations

import pytest

import headgate
from headgate import Outcome, State
from headgate.core import AckRequest


def test_ack_many_applies_each_outcome_and_reports_lost(store: headgate.Store) -> None:
    client = headgate.Client(store)
    client.enqueue_many(
        [headgate.Envelope(kind="k", payload=b"%d" % i, queue="am") for i in range(4)]
    )
    claims = store.admit("w", ["am"], 4)
    assert len(claims) == 4
    store.ack(claims[0], Outcome.SUCCESS)  # already finished: its second ack is "lost"
    lost = store.ack_many([
        AckRequest(claims[0], "success"),
        AckRequest(claims[1], "success", result=b"r1"),
        AckRequest(claims[2], "retry", error="boom", delay_ms=60_000, logs=("line",)),
        AckRequest(claims[3], "snooze", delay_ms=60_000),
    ])
    assert lost == [claims[0].job.id]
    assert store.get_job(claims[1].job.id).state == State.COMPLETED
    assert store.get_result(claims[1].job.id).bytes == b"r1"
    retried = store.get_job(claims[2].job.id)
    assert retried.state == State.RETRYABLE and retried.attempt == 1
    assert retried.errors[-1]["error"] == "boom" and retried.errors[-1]["logs"] == ["line"]
    snoozed = store.get_job(claims[3].job.id)
    assert snoozed.state == State.SCHEDULED and snoozed.attempt == 0
    counts = store.counts("am")
    assert counts["completed"] == 2 and counts["running"] == 0


def test_ack_and_admit_is_one_step(store: headgate.Store) -> None:
    client = headgate.Client(store)
    client.enqueue_many(
        [headgate.Envelope(kind="k", payload=b"%d" % i, queue="aa") for i in range(5)]
    )
    first = store.admit("w", ["aa"], 2)
    lost, claims = store.ack_and_admit(
        [AckRequest(c, "success") for c in first], "w", ["aa"], 2
    )
    assert lost == []
    assert len(claims) == 2 and not {c.job.id for c in claims} & {c.job.id for c in first}
    assert all(store.get_job(c.job.id).state == State.COMPLETED for c in first)
    assert all(store.get_job(c.job.id).state == State.RUNNING for c in claims)
    # A stale ack is reported lost and does not stop the admission.
    lost, more = store.ack_and_admit([AckRequest(first[0], "success")], "w", ["aa"], 5)
    assert lost == [first[0].job.id] and len(more) == 1


def test_release_counts_only_claims_still_held(store: headgate.Store) -> None:
    client = headgate.Client(store)
    client.enqueue_many(
        [headgate.Envelope(kind="k", payload=b"%d" % i, queue="rel") for i in range(3)]
    )
    claims = store.admit("w", ["rel"], 3)
    store.ack(claims[0], Outcome.SUCCESS)
    assert store.release(claims) == 2
    released = store.get_job(claims[1].job.id)
    assert released.state == State.AVAILABLE and released.attempt == 0


def test_weight_beyond_burst_is_explained_as_never(store: headgate.Store) -> None:
    store.upsert_rate_class("tiny", limit=2, window_ms=1000, burst=2)
    job_id = headgate.Client(store).enqueue("k", b"", queue="wb", rate_class="tiny", weight=3)
    why = store.explain_admission(job_id)
    assert why.blocked_by == "rate_class" and why.detail["weight_exceeds_burst"] is True
    assert why.estimated_admission_ms is None


@pytest.mark.parametrize("via", ["ack_many", "ack_and_admit"])
def test_plain_successes_are_checked_job_by_job(store: headgate.Store, via: str) -> None:
    """Plain successes (nothing but the success to record) take a shorter path on
    SQLite; each still needs its own row running under its own lease and fence."""
    client = headgate.Client(store)
    client.enqueue_many([headgate.Envelope(kind="k", payload=b"%d" % i, queue="ps")
                         for i in range(4)])
    client.enqueue("k", b"gone-after", queue="ps", retention_ms=0)
    claims = sorted(store.admit("w", ["ps"], 5), key=lambda c: c.job.payload)
    kept, moved, cancelled, last, dropped = claims
    assert dropped.job.payload == b"gone-after"
    # Released and taken again: the row runs under a new lease and fence.
    assert store.release([moved]) == 1
    (again,) = store.admit("w2", ["ps"], 1)
    assert again.job.id == moved.job.id and again.fence != moved.fence
    store.operator_cancel(cancelled.job.id)
    acks = [AckRequest(c, "success") for c in (kept, moved, cancelled, last, dropped)]
    if via == "ack_many":
        lost = store.ack_many(acks)
    else:
        lost, _ = store.ack_and_admit(acks, "w", ["ps"], 0)
    assert lost == sorted([moved.job.id, cancelled.job.id])
    assert store.get_job(kept.job.id).state == State.COMPLETED
    assert store.get_job(last.job.id).state == State.COMPLETED
    now_running = store.get_job(moved.job.id)
    assert now_running.state == State.RUNNING and now_running.fence == again.fence
    assert store.get_job(cancelled.job.id).state == State.CANCELLED
    assert store.get_job(dropped.job.id) is None
    counts = store.counts("ps")
    assert counts["completed"] == 2 and counts["running"] == 1
    assert store.get_job(kept.job.id).finalized_at_ms is not None


def test_a_large_batch_of_plain_successes_is_acked_in_full(store: headgate.Store) -> None:
    """More acks than one statement takes (500: four bound values an ack), with a lost
    one among them."""
    client = headgate.Client(store)
    client.enqueue_many([headgate.Envelope(kind="k", payload=b"%d" % i, queue="big")
                         for i in range(1_200)])
    claims = store.admit("w", ["big"], 1_200)
    assert len(claims) == 1_200
    stale = claims[7]
    store.ack(stale, Outcome.SUCCESS)
    lost = store.ack_many([AckRequest(c, "success") for c in claims])
    assert lost == [stale.job.id]
    counts = store.counts("big")
    assert counts["completed"] == 1_200 and counts["running"] == 0
