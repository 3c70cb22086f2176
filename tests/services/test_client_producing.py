"""The Client's producing policy over a real store: authorizer, middleware,
insert hooks, plugins and the circuit breaker. The store's own checks are
headgate/testing/conformance/test_port_enqueue.py."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from headgate import (
    CircuitBreaker,
    CircuitOpen,
    Client,
    Duplicate,
    EnqueueContext,
    EnqueueForbidden,
    Envelope,
    Job,
    Plugin,
    Store,
    StoreUnavailable,
    open_store,
)


def total(store: Store) -> int:
    return sum(store.counts().values())


def get(store: Store, job_id: str, payload: bool = False) -> Job:
    job = store.get_job(job_id, include_payload=payload)
    assert job is not None
    return job


# -- Client policy ---------------------------------------------------------------------

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
