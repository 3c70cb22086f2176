"""explain_admission: each `blocked_by` value, with the blocking policy's
numbers in `detail`, and agreement with what admit then does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headgate import Client, Outcome, Store
from headgate.core import Explanation

Q = "default"


def explain(store: Store, job_id: str) -> dict[str, Any]:
    got = store.explain_admission(job_id)
    assert isinstance(got, Explanation)
    answer = got.as_dict()
    assert set(answer) == {"admissible", "blocked_by", "detail", "estimated_admission_ms"}
    return answer


def test_head_job_is_admissible(store: Store, client: Client) -> None:
    job_id = client.enqueue("work", b"x", partition_key="acme")
    answer = explain(store, job_id)
    assert answer["admissible"] is True and answer["blocked_by"] is None
    assert answer["detail"]["state"] == "available"
    assert answer["detail"]["position_in_partition"] == 0
    assert answer["estimated_admission_ms"] == 0
    assert [c.job.id for c in store.admit("w", [Q], capacity=1)] == [job_id]


def test_rate_class_with_tokens_and_refill(store: Store, client: Client) -> None:
    store.upsert_rate_class("smtp", limit=2, window_ms=10_000, burst=2)
    ids = [client.enqueue("work", f"{i}".encode(), rate_class="smtp", weight=1)
           for i in range(3)]
    assert len(store.admit("w", [Q], capacity=10)) == 2
    (waiting,) = [i for i in ids if store.get_job(i).state.value == "available"]  # type: ignore[union-attr]
    answer = explain(store, waiting)
    assert answer["admissible"] is False and answer["blocked_by"] == "rate_class"
    detail = answer["detail"]
    assert detail["rate_class"] == "smtp"
    assert 0 <= detail["tokens_available"] < 0.1
    assert (detail["limit"], detail["window_ms"], detail["burst"], detail["weight"]) == (
        2, 10_000, 2, 1)
    # one token takes 5 s at 2 per 10 s
    assert 4_500 <= detail["refill_in_ms"] <= 5_000
    assert answer["estimated_admission_ms"] == detail["refill_in_ms"]


def test_paused_rate_class(store: Store, client: Client) -> None:
    store.upsert_rate_class("smtp", limit=5, window_ms=1000, paused=True)
    job_id = client.enqueue("work", b"x", rate_class="smtp")
    answer = explain(store, job_id)
    assert answer["blocked_by"] == "rate_class" and answer["detail"]["paused"] is True
    assert answer["detail"]["tokens_available"] == 5
    assert store.admit("w", [Q], capacity=1) == []


def test_concurrency_limit_running_vs_ceiling(store: Store, client: Client) -> None:
    store.upsert_concurrency_limit("two-per-tenant", queue=Q, max_concurrent=2)
    ids = [client.enqueue("work", f"{i}".encode(), partition_key="t") for i in range(3)]
    assert len(store.admit("w", [Q], capacity=10)) == 2
    answer = explain(store, ids[2])
    assert answer["admissible"] is False and answer["blocked_by"] == "concurrency_limit"
    detail = answer["detail"]
    assert detail["limit"] == "two-per-tenant"
    assert (detail["running"], detail["max_concurrent"]) == (2, 2)
    assert detail["on_saturated"] == "queue" and detail["partition_key"] == "t"


def test_fairness_with_position(store: Store, client: Client) -> None:
    ids = [client.enqueue("work", f"{i}".encode(), partition_key="p") for i in range(4)]
    answer = explain(store, ids[3])
    assert answer["admissible"] is False and answer["blocked_by"] == "fairness"
    assert answer["detail"]["position_in_partition"] == 3
    assert answer["detail"]["partition_waiting"] == 4
    # a higher priority job jumps ahead, so positions move
    urgent = client.enqueue("work", b"u", partition_key="p", priority=9)
    assert explain(store, urgent)["admissible"] is True
    assert explain(store, ids[0])["detail"]["position_in_partition"] == 1
    store.admit("w", [Q], capacity=2)
    assert explain(store, ids[3])["detail"]["position_in_partition"] == 2


def test_quarantine_with_crash_count(
    store: Store, client: Client, quarantine: Callable[[Store, str, bytes], str]
) -> None:
    job_id = client.enqueue("poison", b"boom")
    fp = quarantine(store, "poison", b"boom")
    answer = explain(store, job_id)
    assert answer["admissible"] is False and answer["blocked_by"] == "quarantine"
    assert answer["detail"]["fingerprint"] == fp
    assert answer["detail"]["crash_count"] == 3


def test_schedule(store: Store, client: Client) -> None:
    at = store.now_ms() + 60_000
    job_id = client.enqueue("work", b"x", scheduled_at_ms=at)
    answer = explain(store, job_id)
    assert answer["admissible"] is False and answer["blocked_by"] == "schedule"
    assert answer["detail"]["state"] == "scheduled"
    assert answer["detail"]["scheduled_at_ms"] == at
    assert 55_000 <= answer["estimated_admission_ms"] <= 60_000


def test_retryable_waits_on_schedule(store: Store, client: Client) -> None:
    job_id = client.enqueue("work", b"x")
    (claim,) = store.admit("w", [Q], capacity=1)
    store.ack(claim, Outcome.RETRY, error="later", delay_ms=30_000)
    answer = explain(store, job_id)
    assert answer["blocked_by"] == "schedule" and answer["detail"]["state"] == "retryable"
    assert 25_000 <= answer["estimated_admission_ms"] <= 30_000


def test_queue_paused(store: Store, client: Client) -> None:
    job_id = client.enqueue("work", b"x", queue="mail")
    store.set_queue_paused("mail", True)
    answer = explain(store, job_id)
    assert answer["admissible"] is False and answer["blocked_by"] == "queue_paused"
    assert answer["detail"]["queue"] == "mail"
    store.set_queue_paused("mail", False)
    assert explain(store, job_id)["admissible"] is True


def test_null_for_running(store: Store, client: Client) -> None:
    job_id = client.enqueue("work", b"x")
    store.admit("w", [Q], capacity=1)
    answer = explain(store, job_id)
    assert answer["blocked_by"] is None and answer["admissible"] is False
    assert answer["detail"]["state"] == "running"


def test_null_for_pending(store: Store, client: Client) -> None:
    job_id = client.enqueue("work", b"x", pending=True)
    answer = explain(store, job_id)
    assert answer["blocked_by"] is None and answer["detail"]["state"] == "pending"


def test_null_for_terminal_states(store: Store, client: Client) -> None:
    done = client.enqueue("work", b"done")
    dead = client.enqueue("work", b"dead")
    gone = client.enqueue("work", b"gone")
    claims = {c.job.id: c for c in store.admit("w", [Q], capacity=3)}
    store.ack(claims[done], Outcome.SUCCESS)
    store.ack(claims[dead], Outcome.SKIP, error="no")
    store.ack(claims[gone], Outcome.UNDECODABLE, error="bad bytes")
    cancelled = client.enqueue("work", b"cancel")
    store.operator_cancel(cancelled)
    for job_id, state in ((done, "completed"), (dead, "archived"), (gone, "undecodable"),
                          (cancelled, "cancelled")):
        answer = explain(store, job_id)
        assert answer["blocked_by"] is None and answer["admissible"] is False
        assert answer["detail"]["state"] == state


def test_unknown_job(store: Store) -> None:
    assert store.explain_admission("no-such-job") is None


def test_explanation_agrees_with_admit(store: Store, client: Client) -> None:
    store.upsert_rate_class("slow", limit=1, window_ms=60_000, burst=1)
    a = client.enqueue("work", b"a", rate_class="slow")
    b = client.enqueue("work", b"b", rate_class="slow", partition_key="other")
    assert explain(store, a)["admissible"] and explain(store, b)["admissible"]
    (claim,) = store.admit("w", [Q], capacity=10)
    left = b if claim.job.id == a else a
    assert explain(store, left)["blocked_by"] == "rate_class"
    assert store.admit("w", [Q], capacity=10) == []
