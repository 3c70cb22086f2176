"""Producing jobs (SPEC §7): identity, uniqueness, all-or-nothing batches, quarantine and
backpressure in the store; authorizer, middleware, hooks, plugins and the circuit
breaker in the Client."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from headgate import (
    Backpressure,
    CircuitBreaker,
    CircuitOpen,
    Client,
    Duplicate,
    EnqueueContext,
    EnqueueForbidden,
    Envelope,
    IdConflict,
    InvalidInput,
    Job,
    Outcome,
    Plugin,
    Quarantined,
    State,
    Store,
    StoreUnavailable,
    open_store,
)

Q = "default"


def total(store: Store) -> int:
    return sum(store.counts().values())


def get(store: Store, job_id: str, payload: bool = False) -> Job:
    job = store.get_job(job_id, include_payload=payload)
    assert job is not None
    return job


def finish(store: Store, job_id: str, outcome: Outcome = Outcome.SUCCESS) -> None:
    (claim,) = [c for c in store.admit("w", [get(store, job_id).queue], capacity=100)
                if c.job.id == job_id]
    store.ack(claim, outcome)


# -- identity (§7.1) ------------------------------------------------------------------

def test_same_id_same_content_is_an_idempotent_replay(store: Store, client: Client) -> None:
    fields = {"id": "order-42", "queue": "mail", "partition_key": "acme", "tags": ["b", "a"],
              "headers": {"x": "1"}, "priority": 3}
    first = client.enqueue("email.send", b"hello", **fields)
    before = get(store, first, payload=True)
    assert first == "order-42"
    replay = client.enqueue("email.send", b"hello", **{**fields, "tags": ["a", "b", "a"]})
    assert replay == "order-42"
    assert total(store) == 1 and store.counts("mail")["available"] == 1
    assert get(store, first, payload=True) == before  # no rewrite
    history = store.history("mail", 0, 60_000)
    assert sum(b["arrived"] for b in history) == 1  # no second arrival


def test_same_id_replays_even_after_the_job_ran(store: Store, client: Client) -> None:
    client.enqueue("k", b"p", id="once")
    finish(store, "once")
    assert client.enqueue("k", b"p", id="once") == "once"
    assert get(store, "once").state is State.COMPLETED


@pytest.mark.parametrize(
    "change",
    [{"payload": b"other"}, {"kind": "other.kind"}, {"queue": "q2"}, {"priority": 1},
     {"partition_key": "p"}, {"max_attempts": 3}, {"tags": ["t"]}, {"weight": 2}],
)
def test_same_id_different_content_is_a_conflict(store: Store, client: Client,
                                                 change: dict) -> None:
    base = {"kind": "k", "payload": b"p", "id": "job-1"}
    client.enqueue_many([Envelope(**base)])
    with pytest.raises(IdConflict) as info:
        client.enqueue_many([Envelope(**{**base, **change})])
    assert str(info.value) == "id conflict: job job-1"
    assert info.value.job_id == "job-1"
    assert total(store) == 1
    assert get(store, "job-1", payload=True).payload == b"p"


def test_id_conflict_in_a_batch_writes_nothing(store: Store, client: Client) -> None:
    client.enqueue("k", b"p", id="taken")
    with pytest.raises(IdConflict):
        client.enqueue_many([Envelope(kind="k", payload=b"fresh"),
                             Envelope(kind="k", payload=b"changed", id="taken")])
    assert total(store) == 1


# -- uniqueness (§7.2) ----------------------------------------------------------------

def test_lifecycle_uniqueness_until_the_holder_is_terminal(store: Store,
                                                           client: Client) -> None:
    holder = client.enqueue("report", b"1", unique_key=b"daily")
    with pytest.raises(Duplicate) as info:
        client.enqueue("report", b"2", unique_key=b"daily")
    assert info.value.existing_id == holder and info.value.replaced is False
    assert total(store) == 1
    (claim,) = store.admit("w", [Q], capacity=1)
    with pytest.raises(Duplicate):  # running is still live
        client.enqueue("report", b"3", unique_key=b"daily")
    store.ack(claim, Outcome.RETRY, error="x", delay_ms=0)
    assert get(store, holder).state is State.RETRYABLE
    with pytest.raises(Duplicate):  # retryable is still live
        client.enqueue("report", b"4", unique_key=b"daily")
    (claim,) = store.admit("w", [Q], capacity=1)
    store.ack(claim, Outcome.SKIP, error="give up")  # archived: terminal, the key is released
    second = client.enqueue("report", b"5", unique_key=b"daily")
    assert second != holder and total(store) == 2


def test_lifecycle_key_released_by_completion_deletion_and_cancel(store: Store,
                                                              client: Client) -> None:
    first = client.enqueue("k", b"1", unique_key=b"u", retention_ms=0)
    finish(store, first)  # retention 0: the row is deleted
    assert store.get_job(first) is None
    second = client.enqueue("k", b"2", unique_key=b"u")
    finish(store, second)
    assert get(store, second).state is State.COMPLETED
    third = client.enqueue("k", b"3", unique_key=b"u")
    store.operator_cancel(third)
    fourth = client.enqueue("k", b"4", unique_key=b"u")
    assert len({first, second, third, fourth}) == 4


def test_throttle_window_is_released_by_the_clock(store: Store, client: Client) -> None:
    first = client.enqueue("ping", b"1", unique_key=b"host-a", unique_window_ms=300)
    finish(store, first)  # terminal, but the window still holds
    with pytest.raises(Duplicate) as info:
        client.enqueue("ping", b"2", unique_key=b"host-a", unique_window_ms=300)
    assert info.value.existing_id == first
    until = get(store, first).enqueued_at_ms + 300
    while store.now_ms() < until:
        time.sleep(0.02)
    second = client.enqueue("ping", b"3", unique_key=b"host-a", unique_window_ms=300)
    assert second != first
    with pytest.raises(Duplicate) as again:
        client.enqueue("ping", b"4", unique_key=b"host-a", unique_window_ms=300)
    assert again.value.existing_id == second


def test_unique_keys_are_namespaced_by_kind(store: Store, client: Client) -> None:
    a = client.enqueue("kind.a", b"", unique_key=b"same")
    b = client.enqueue("kind.b", b"", unique_key=b"same")
    assert a != b and total(store) == 2


def test_unique_exclude_kind_shares_the_key_across_kinds(store: Store,
                                                         client: Client) -> None:
    a = client.enqueue("kind.a", b"", unique_key=b"global", unique_exclude_kind=True)
    with pytest.raises(Duplicate) as info:
        client.enqueue("kind.b", b"", unique_key=b"global", unique_exclude_kind=True)
    assert info.value.existing_id == a
    # an excluded key and a kind-namespaced key of the same bytes do not collide
    client.enqueue("kind.a", b"", unique_key=b"global")
    assert total(store) == 2


def test_duplicate_within_one_batch_writes_nothing(store: Store, client: Client) -> None:
    # Not a Duplicate: that would name an "existing" job the rollback never stored.
    with pytest.raises(InvalidInput, match="same unique key twice"):
        client.enqueue_many([Envelope(kind="k", payload=b"1", unique_key=b"u"),
                             Envelope(kind="k", payload=b"2", unique_key=b"u")])
    assert total(store) == 0


def test_replace_bit_1_payload(store: Store, client: Client) -> None:
    holder = client.enqueue("k", b"old", unique_key=b"u", headers={"v": "1"})
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"new", unique_key=b"u", unique_replace=1, headers={"v": "2"},
                       priority=9)
    assert info.value.existing_id == holder and info.value.replaced is True
    job = get(store, holder, payload=True)
    assert job.payload == b"new" and job.headers == {"v": "2"}
    assert job.priority == 0  # bit 4 was not set
    assert total(store) == 1


def test_replace_bit_2_scheduled_at(store: Store, client: Client) -> None:
    now = store.now_ms()
    holder = client.enqueue("k", b"p", unique_key=b"u", scheduled_at_ms=now + 60_000)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"p", unique_key=b"u", unique_replace=2,
                       scheduled_at_ms=now + 120_000)
    assert info.value.replaced is True
    job = get(store, holder)
    assert job.scheduled_at_ms == now + 120_000 and job.state is State.SCHEDULED


def test_replace_bit_4_priority(store: Store, client: Client) -> None:
    holder = client.enqueue("k", b"old", unique_key=b"u", priority=1)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"new", unique_key=b"u", unique_replace=4, priority=7)
    assert info.value.replaced is True
    job = get(store, holder, payload=True)
    assert job.priority == 7 and job.payload == b"old"  # bit 1 was not set


def test_replace_bit_8_max_attempts(store: Store, client: Client) -> None:
    holder = client.enqueue("k", b"p", unique_key=b"u", max_attempts=3)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"p", unique_key=b"u", unique_replace=8, max_attempts=11)
    assert info.value.replaced is True
    assert get(store, holder).max_attempts == 11


def test_replace_all_bits_at_once(store: Store, client: Client) -> None:
    now = store.now_ms()
    holder = client.enqueue("k", b"old", unique_key=b"u", scheduled_at_ms=now + 60_000)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"new", unique_key=b"u", unique_replace=15,
                       scheduled_at_ms=now + 90_000, priority=5, max_attempts=2)
    assert info.value.replaced is True
    job = get(store, holder, payload=True)
    assert (job.payload, job.scheduled_at_ms, job.priority, job.max_attempts) == (
        b"new", now + 90_000, 5, 2)


def retryable_holder(store: Store, client: Client) -> tuple[str, int]:
    """A unique-key holder waiting out a retry delay; returns (id, its due time)."""
    holder = client.enqueue("k", b"old", unique_key=b"u")
    (claim,) = store.admit("w", [Q], capacity=1)
    store.ack(claim, Outcome.RETRY, "flaky", delay_ms=1_000)
    job = get(store, holder)
    assert job.state is State.RETRYABLE
    return holder, job.scheduled_at_ms


def test_debounce_pushes_the_due_time_of_a_retryable_holder(store: Store,
                                                            client: Client) -> None:
    holder, due = retryable_holder(store, client)
    before = store.now_ms()
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"new", unique_key=b"u", unique_debounce_ms=5_000)
    assert info.value.replaced is True
    job = get(store, holder, payload=True)
    assert job.payload == b"new" and job.state is State.RETRYABLE
    assert job.scheduled_at_ms >= before + 5_000 > due


def test_replace_bit_2_moves_a_retryable_holder(store: Store, client: Client) -> None:
    holder, _ = retryable_holder(store, client)
    later = store.now_ms() + 60_000
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"old", unique_key=b"u", unique_replace=2, scheduled_at_ms=later)
    assert info.value.replaced is True
    job = get(store, holder)
    assert (job.state, job.scheduled_at_ms) == (State.RETRYABLE, later)


def test_schema_version_and_max_attempts_fit_32_bits_on_every_backend(client: Client) -> None:
    for field in ("schema_version", "max_attempts"):
        with pytest.raises(InvalidInput, match=f"{field} must be <= 2147483647"):
            client.enqueue("k", b"", **{field: 2**31})
        client.enqueue("k", b"", **{field: 2**31 - 1})


def test_replace_leaves_a_running_holder_alone(store: Store, client: Client) -> None:
    holder = client.enqueue("k", b"old", unique_key=b"u", priority=1)
    store.admit("w", [Q], capacity=1)
    with pytest.raises(Duplicate) as info:
        client.enqueue("k", b"new", unique_key=b"u", unique_replace=15, priority=9)
    assert info.value.existing_id == holder and info.value.replaced is False
    job = get(store, holder, payload=True)
    assert (job.payload, job.priority, job.state) == (b"old", 1, State.RUNNING)


def test_debounce_pushes_due_time_and_replaces_payload_and_tags(store: Store,
                                                                client: Client) -> None:
    first_at = store.now_ms()
    holder = client.enqueue("sync", b"v1", unique_key=b"user-1", unique_debounce_ms=400,
                            tags=["first"])
    job = get(store, holder)
    assert job.state is State.SCHEDULED
    assert job.scheduled_at_ms >= first_at + 400
    time.sleep(0.05)
    second_at = store.now_ms()
    with pytest.raises(Duplicate) as info:
        client.enqueue("sync", b"v2", unique_key=b"user-1", unique_debounce_ms=400,
                       tags=["second"])
    assert info.value.existing_id == holder and info.value.replaced is True
    job = get(store, holder, payload=True)
    assert job.payload == b"v2" and job.tags == ("second",)
    assert job.scheduled_at_ms >= second_at + 400 > first_at + 400
    assert job.state is State.SCHEDULED and total(store) == 1
    assert store.admit("w", [Q], capacity=1) == []  # trailing edge: not yet
    while store.now_ms() < job.scheduled_at_ms:
        time.sleep(0.02)
    (claim,) = store.admit("w", [Q], capacity=1)
    assert claim.job.id == holder and claim.job.payload == b"v2"


# -- batches --------------------------------------------------------------------------

def test_batch_returns_ids_in_order(store: Store, client: Client) -> None:
    envs = [Envelope(kind="k", payload=f"{i}".encode(), id=f"id-{i}") for i in range(5)]
    assert client.enqueue_many(envs) == [f"id-{i}" for i in range(5)]
    assert total(store) == 5


def test_batch_with_one_invalid_member_writes_nothing(store: Store, client: Client) -> None:
    envs = [Envelope(kind="k", payload=b"ok") for _ in range(3)]
    with pytest.raises(InvalidInput, match="weight"):
        client.enqueue_many([*envs, Envelope(kind="k", payload=b"bad", weight=0)])
    assert total(store) == 0
    with pytest.raises(InvalidInput):
        store.enqueue_many([*envs, Envelope(kind="", payload=b"bad")])
    assert total(store) == 0


def test_batch_with_one_duplicate_writes_nothing(store: Store, client: Client) -> None:
    holder = client.enqueue("k", b"p", unique_key=b"u")
    with pytest.raises(Duplicate) as info:
        client.enqueue_many([Envelope(kind="k", payload=b"1"),
                             Envelope(kind="k", payload=b"2", unique_key=b"u"),
                             Envelope(kind="k", payload=b"3", unique_key=b"fresh")])
    assert info.value.existing_id == holder
    assert total(store) == 1
    # the batch's other key was not taken either
    client.enqueue("k", b"4", unique_key=b"fresh")


def test_batch_with_the_same_id_twice_is_rejected(store: Store, client: Client) -> None:
    with pytest.raises(InvalidInput):
        client.enqueue_many([Envelope(kind="k", id="x"), Envelope(kind="k", id="x")])
    assert total(store) == 0


# -- quarantine and backpressure --------------------------------------------------------

def test_quarantined_fingerprint_is_rejected(
    store: Store, client: Client, quarantine: Callable[[Store, str, bytes], str]
) -> None:
    fp = quarantine(store, "poison", b"pill")
    before = total(store)
    with pytest.raises(Quarantined) as info:
        client.enqueue("poison", b"pill")
    assert info.value.fingerprint == fp
    with pytest.raises(Quarantined):
        client.enqueue_many([Envelope(kind="ok", payload=b"x"),
                             Envelope(kind="poison", payload=b"pill")])
    assert total(store) == before
    client.enqueue("poison", b"a different pill")  # other content is fine


def test_backpressure_at_the_exact_limit(store: Store, client: Client) -> None:
    store.set_enqueue_limit(Q, 3)
    for i in range(3):
        client.enqueue("k", f"{i}".encode())
    with pytest.raises(Backpressure) as info:
        client.enqueue("k", b"4th")
    err = info.value
    assert (err.queue, err.limit, err.current, err.incoming) == (Q, 3, 3, 1)
    assert total(store) == 3
    client.enqueue("k", b"elsewhere", queue="other")  # per queue


def test_backpressure_counts_the_whole_batch(store: Store, client: Client) -> None:
    store.set_enqueue_limit(Q, 3)
    client.enqueue("k", b"1")
    client.enqueue("k", b"2")
    with pytest.raises(Backpressure) as info:
        client.enqueue_many([Envelope(kind="k", payload=b"3"), Envelope(kind="k", payload=b"4")])
    assert (info.value.current, info.value.incoming) == (2, 2)
    assert total(store) == 2
    client.enqueue_many([Envelope(kind="k", payload=b"3")])  # exactly at the limit: accepted


def test_backpressure_releases_as_jobs_finish(store: Store, client: Client) -> None:
    store.set_enqueue_limit(Q, 1)
    first = client.enqueue("k", b"1")
    with pytest.raises(Backpressure):
        client.enqueue("k", b"2")
    finish(store, first)  # completed is not unfinished
    client.enqueue("k", b"2")
    store.set_enqueue_limit(Q, None)  # no limit
    for i in range(5):
        client.enqueue("k", f"more-{i}".encode())


def test_enqueue_limit_zero_is_a_kill_switch(store: Store, client: Client) -> None:
    store.set_enqueue_limit(Q, 0)
    with pytest.raises(Backpressure) as info:
        client.enqueue("k", b"x")
    assert (info.value.limit, info.value.current, info.value.incoming) == (0, 0, 1)
    assert total(store) == 0
    with pytest.raises(InvalidInput):
        store.set_enqueue_limit(Q, -1)


# -- Client policy (§7.3) ---------------------------------------------------------------

def test_authorizer_forbids_per_kind_and_identity(store: Store) -> None:
    seen: list[tuple[object, str]] = []

    def authorizer(context: EnqueueContext, env: Envelope) -> bool:
        seen.append((context.identity, env.kind))
        return env.kind != "admin.wipe" or context.identity == "root"

    client = Client(store, authorizer=authorizer)
    with pytest.raises(EnqueueForbidden) as info:
        client.enqueue("admin.wipe", b"", context=EnqueueContext("http", "mallory"))
    assert info.value.kind == "admin.wipe" and str(info.value) == "enqueue forbidden: admin.wipe"
    with pytest.raises(EnqueueForbidden):  # one forbidden member stops the batch
        client.enqueue_many([Envelope(kind="ok"), Envelope(kind="admin.wipe")],
                            context=EnqueueContext("http", "mallory"))
    assert total(store) == 0
    client.enqueue("admin.wipe", b"", context=EnqueueContext("http", "root"))
    assert total(store) == 1
    assert ("mallory", "admin.wipe") in seen and ("root", "admin.wipe") in seen


def test_middleware_runs_in_order_and_may_rewrite(store: Store) -> None:
    calls: list[str] = []

    def tagger(name: str) -> Callable:
        def mw(context: EnqueueContext, batch: list[Envelope],
               call_next: Callable[[list[Envelope]], list[str]]) -> list[str]:
            calls.append(f"{name}>")
            batch = [Envelope(**{**_fields(e), "tags": [*e.tags, name]}) for e in batch]
            ids = call_next(batch)
            calls.append(f"<{name}")
            return ids
        return mw

    client = Client(store, middleware=[tagger("outer"), tagger("inner")])
    job_id = client.enqueue("k", b"p")
    assert calls == ["outer>", "inner>", "<inner", "<outer"]
    assert get(store, job_id).tags == ("inner", "outer")


def _fields(env: Envelope) -> dict:
    return {name: getattr(env, name) for name in Envelope.__dataclass_fields__}


class RecordingHook:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def before_insert(self, context: EnqueueContext, envelopes: Sequence[Envelope]) -> None:
        self.log.append((self.name, "before", [e.kind for e in envelopes]))

    def after_insert(self, context: EnqueueContext, envelopes: Sequence[Envelope],
                     ids: list[str] | None, error: BaseException | None) -> None:
        self.log.append((self.name, "after", ids, type(error).__name__ if error else None))


def test_insert_hooks_before_and_after_with_error(store: Store) -> None:
    log: list = []
    client = Client(store, insert_hooks=[RecordingHook("h", log)])
    job_id = client.enqueue("k", b"p", unique_key=b"u")
    assert log == [("h", "before", ["k"]), ("h", "after", [job_id], None)]
    log.clear()
    with pytest.raises(Duplicate):
        client.enqueue("k", b"p2", unique_key=b"u")
    assert log == [("h", "before", ["k"]), ("h", "after", None, "Duplicate")]


def test_before_hook_can_veto_the_insert(store: Store) -> None:
    class Veto:
        def before_insert(self, context: EnqueueContext, envelopes: Sequence[Envelope]) -> None:
            raise RuntimeError("vetoed")

        def after_insert(self, *args: object) -> None:
            pass

    with pytest.raises(RuntimeError, match="vetoed"):
        Client(store, insert_hooks=[Veto()]).enqueue("k", b"p")
    assert total(store) == 0


def test_plugins_global_then_kind_scoped(store: Store) -> None:
    order: list[str] = []

    def mark(name: str) -> Callable:
        def mw(context: EnqueueContext, batch: list[Envelope],
               call_next: Callable[[list[Envelope]], list[str]]) -> list[str]:
            order.append(name)
            return call_next(batch)
        return mw

    log: list = []
    client = Client(store, middleware=[mark("client")], plugins=[
        Plugin("emails-only", middleware=[mark("scoped")], kinds=frozenset({"email.send"}),
               insert_hooks=[RecordingHook("scoped-hook", log)]),
        Plugin("everywhere", middleware=[mark("global")]),
        Plugin("sms-only", middleware=[mark("sms")], kinds=frozenset({"sms.send"})),
    ])
    client.enqueue("email.send", b"")
    assert order == ["client", "global", "scoped"]
    assert [entry[:2] for entry in log] == [("scoped-hook", "before"), ("scoped-hook", "after")]
    order.clear()
    log.clear()
    client.enqueue("other.kind", b"")
    assert order == ["client", "global"] and log == []
    order.clear()
    client.enqueue_many([Envelope(kind="email.send"), Envelope(kind="sms.send")])
    assert order == ["client", "global"]  # a scoped plugin needs the whole batch in scope


def test_circuit_breaker_opens_on_an_unavailable_store(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    store = open_store(f"sqlite:///{path}", busy_timeout_ms=50)
    breaker = CircuitBreaker(failure_threshold=2, reset_after_ms=300)
    client = Client(store, circuit_breaker=breaker)
    client.enqueue("k", b"before")
    assert breaker.state == "closed"
    locker = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        locker.execute("BEGIN EXCLUSIVE")  # the store really cannot write now
        for _ in range(2):
            with pytest.raises(StoreUnavailable):
                client.enqueue("k", b"during")
        assert breaker.state == "open"
        with pytest.raises(CircuitOpen) as info:
            client.enqueue("k", b"while open")
        assert info.value.state == "open" and 0 < info.value.retry_after_ms <= 300
        time.sleep(0.32)
        assert breaker.state == "half_open"
        with pytest.raises(StoreUnavailable):  # the one trial fails: open again
            client.enqueue("k", b"trial")
        assert breaker.state == "open"
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    time.sleep(0.32)
    client.enqueue("k", b"after")  # trial succeeds: closed
    assert breaker.state == "closed"
    assert store.counts()["available"] == 2
    store.close()


def test_a_hook_failing_during_the_half_open_trial_leaves_the_next_call_its_trial(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.db"
    store = open_store(f"sqlite:///{path}", busy_timeout_ms=50)

    class Hook:
        boom = False

        def before_insert(self, context: EnqueueContext, envs: Sequence[Envelope]) -> None:
            if self.boom:
                raise RuntimeError("hook failed")

        def after_insert(self, *args: object) -> None:
            pass

    hook = Hook()
    breaker = CircuitBreaker(failure_threshold=1, reset_after_ms=100)
    client = Client(store, circuit_breaker=breaker, insert_hooks=[hook])
    locker = sqlite3.connect(path, isolation_level=None, timeout=0)
    locker.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StoreUnavailable):
        client.enqueue("k", b"during")
    locker.execute("ROLLBACK")
    locker.close()
    time.sleep(0.12)
    assert breaker.state == "half_open"
    hook.boom = True
    with pytest.raises(RuntimeError, match="hook failed"):  # the trial never reached it
        client.enqueue("k", b"trial")
    hook.boom = False
    client.enqueue("k", b"after")  # so this call is the trial, and it closes the circuit
    assert breaker.state == "closed"
    store.close()


def test_circuit_breaker_ignores_caller_errors(store: Store) -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_after_ms=60_000)
    client = Client(store, circuit_breaker=breaker)
    client.enqueue("k", b"p", unique_key=b"u")
    for _ in range(3):
        with pytest.raises(Duplicate):
            client.enqueue("k", b"p", unique_key=b"u")
    assert breaker.state == "closed"
