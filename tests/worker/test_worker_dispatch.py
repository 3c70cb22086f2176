"""The dispatcher's hot path: acks and admission in one transaction when it can, the two
separate calls when it cannot, and never more running handlers than `concurrency`.

The store is wrapped in a pass-through proxy that counts (or breaks) the hot-path calls.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import headgate
from headgate import Job, State, Store, Worker
from headgate.core import AckRequest, Claim
from headgate.worker import JobContext

FAST = {"heartbeat_ms": 100, "poll_ceiling_ms": 50, "lease_ms": 5_000}


class Proxy:
    """Everything goes to the real store; hot-path calls are counted, and can be
    hidden (`without`) or preceded by a hook (`before_combined`)."""

    def __init__(self, store: Store, without: Sequence[str] = ()) -> None:
        self.store = store
        self.without = set(without)
        self.calls: collections.Counter[str] = collections.Counter()
        self.batches: list[list[str]] = []  # job ids of each ack or renew call, in order
        self.before_combined: Callable[[Sequence[AckRequest]], None] | None = None

    def __getattr__(self, name: str) -> Any:
        if name in self.without:
            raise AttributeError(name)
        return getattr(self.store, name)

    def ack_many(self, acks: Sequence[AckRequest]) -> list[str]:
        self.calls["ack_many"] += 1
        self.batches.append([a.claim.job.id for a in acks])
        return self.store.ack_many(acks)

    def renew(self, claims: Sequence[Claim], lease_ms: int = 30_000) -> list[Claim]:
        self.batches.append([c.job.id for c in claims])
        return self.store.renew(claims, lease_ms)

    def admit(self, *args: Any, **kwargs: Any) -> list[Claim]:
        self.calls["admit"] += 1
        return self.store.admit(*args, **kwargs)

    def ack_and_admit(self, acks: Sequence[AckRequest], *args: Any
                      ) -> tuple[list[str], list[Claim]]:
        if "ack_and_admit" in self.without:
            raise AttributeError("ack_and_admit")
        self.calls["ack_and_admit"] += 1
        self.batches.append([a.claim.job.id for a in acks])
        if self.before_combined is not None:
            self.before_combined(acks)
        return self.store.ack_and_admit(acks, *args)


class Running:
    """A handler that records how many instances of it run at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.done = 0
        self._lock = threading.Lock()

    def __call__(self, job: Job, ctx: JobContext) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.0005 * (hash(job.id) % 3))  # uneven, so slots free up out of order
        with self._lock:
            self.now -= 1
            self.done += 1


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def drain(proxy: Proxy, store: Store, n: int, concurrency: int) -> Running:
    client = headgate.Client(store)
    ids = client.enqueue_many([headgate.Envelope(kind="count", payload=b"")
                               for _ in range(n)])
    running = Running()
    worker = Worker(proxy, concurrency=concurrency, **FAST)  # type: ignore[arg-type]
    worker.register("count", running)
    worker.start()
    try:
        wait_for(lambda: store.counts().get("completed", 0) == n, 30, f"{n} completions")
    finally:
        assert worker.stop(drain_ms=1_000, timeout=15) == 0
    assert {store.get_job(i).state for i in ids} == {State.COMPLETED}
    assert running.done == n
    return running


@pytest.mark.parametrize("concurrency", [1, 3])
def test_busy_worker_acks_and_admits_in_one_call_and_never_exceeds_concurrency(
    store: Store, concurrency: int
) -> None:
    proxy = Proxy(store)
    running = drain(proxy, store, 300, concurrency)
    assert running.most <= concurrency
    # Steady state is one combined transaction per turn; ack_many only when there was
    # nothing to admit for (the last acks, a full worker), admit only with no acks.
    assert proxy.calls["ack_and_admit"] > proxy.calls["ack_many"]
    assert proxy.calls["ack_and_admit"] > proxy.calls["admit"]


def test_a_store_without_the_combined_call_gets_separate_acks_and_admits(
    store: Store
) -> None:
    proxy = Proxy(store, without=["ack_and_admit"])
    running = drain(proxy, store, 200, 3)
    assert running.most <= 3
    assert proxy.calls["ack_and_admit"] == 0
    assert proxy.calls["ack_many"] > 0 and proxy.calls["admit"] > 0


def test_a_failing_combined_call_falls_back_to_separate_calls(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = Proxy(store)

    def broken(acks: Sequence[AckRequest]) -> None:
        raise RuntimeError("combined call is broken")

    proxy.before_combined = broken
    running = drain(proxy, store, 100, 2)
    assert running.most <= 2
    assert proxy.calls["ack_many"] > 0  # every batch was written the old way
    assert any(r.getMessage().startswith("combined ack and admit failed")
               for r in caplog.records if r.name == "headgate.worker")


def test_a_lease_lost_before_the_combined_ack_discards_that_outcome_only(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="headgate.worker")
    client = headgate.Client(store)
    victim = client.enqueue("count", b"")
    proxy = Proxy(store)
    cancelled: list[str] = []

    def cancel_victim_first(acks: Sequence[AckRequest]) -> None:
        # An operator cancels the job between its handler returning and its ack.
        if not cancelled and any(a.claim.job.id == victim for a in acks):
            store.operator_cancel(victim)
            cancelled.append(victim)

    proxy.before_combined = cancel_victim_first
    worker = Worker(proxy, concurrency=2, **FAST)  # type: ignore[arg-type]
    running = Running()
    worker.register("count", running)
    worker.start()
    try:
        # The victim's ack rides on a combined call (a slot is free); a later job shows
        # the worker carries on.
        wait_for(lambda: running.done >= 1, 10, "the victim to run")
        later = client.enqueue("count", b"")
        wait_for(lambda: store.get_job(later).state is State.COMPLETED, 10, "later job")
        wait_for(lambda: worker.inflight == 0, 5, "nothing left in flight")
    finally:
        assert worker.stop(drain_ms=1_000, timeout=15) == 0
    assert cancelled == [victim]
    assert store.get_job(victim).state is State.CANCELLED
    assert store.get_result(victim) is None
    messages = [r.getMessage() for r in caplog.records if r.name == "headgate.worker"]
    assert any(m.startswith(f"job {victim} count: lease lost before the ack")
               for m in messages)


def test_acks_and_renewals_hand_job_rows_to_the_store_in_one_order(store: Store) -> None:
    # PostgreSQL locks the rows of a batch in the order given. Acks queue in the order
    # handlers finish, renewals would follow dispatch order: unsorted, the dispatcher
    # and the lease keeper deadlock each other (seen under load as "deadlock detected").
    proxy = Proxy(store)
    worker_options = {**FAST, "lease_ms": 300}  # renew every 100 ms while jobs run
    client = headgate.Client(store)
    client.enqueue_many([headgate.Envelope(kind="slow", payload=b"") for _ in range(40)])
    worker = Worker(proxy, concurrency=8, **worker_options)  # type: ignore[arg-type]

    def slow(job: Job, ctx: JobContext) -> None:
        time.sleep(0.05 + 0.1 * (hash(job.id) % 3))  # finish out of dispatch order

    worker.register("slow", slow)
    worker.start()
    try:
        wait_for(lambda: store.counts().get("completed", 0) == 40, 30, "40 completions")
    finally:
        assert worker.stop(drain_ms=1_000, timeout=15) == 0
    multi = [batch for batch in proxy.batches if len(batch) > 1]
    assert multi, "expected some batches of more than one job"
    assert all(batch == sorted(batch) for batch in multi)


class Probed(Proxy):
    """A store whose change probe (the adapter-provided kind) counts its reads."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.reads = 0

    def change_token(self) -> object:
        self.reads += 1
        return 0


def test_a_draining_worker_skips_the_change_probe_while_polls_fill_every_slot(
    store: Store
) -> None:
    """The probe's value only matters after a poll that left a slot free; a drain whose
    polls keep filling every slot has no use for it, and reading it on every poll was
    ~10 % of a SQLite drain's dispatcher thread."""
    proxy = Probed(store)
    drain(proxy, store, 300, 2)
    polls = proxy.calls["ack_and_admit"] + proxy.calls["admit"]
    assert polls > 100
    assert proxy.reads < polls / 4, (proxy.reads, polls)


class SlowTurns(Proxy):
    """A store whose hot-path calls take `turn_s` longer: a turn dearer than a handler."""

    def __init__(self, store: Store, turn_s: float) -> None:
        super().__init__(store)
        self.turn_s = turn_s

    def admit(self, *args: Any, **kwargs: Any) -> list[Claim]:
        time.sleep(self.turn_s)
        return super().admit(*args, **kwargs)

    def ack_and_admit(self, acks: Sequence[AckRequest], *args: Any
                      ) -> tuple[list[str], list[Claim]]:
        time.sleep(self.turn_s)
        return super().ack_and_admit(acks, *args)


def _pair_after_warm_up(proxy: Proxy, store: Store, warm_s: float, second_s: float
                        ) -> tuple[str, str]:
    """Six jobs of `warm_s` set the typical attempt; then two jobs claimed together,
    one instant and one of `second_s`. Returns the pair's ids."""
    client = headgate.Client(store)
    worker = Worker(proxy, concurrency=2, **FAST)  # type: ignore[arg-type]

    def sleep(job: Job, ctx: JobContext) -> None:
        time.sleep(float(job.payload))

    worker.register("sleep", sleep)
    worker.start()
    try:
        client.enqueue_many([headgate.Envelope(kind="sleep", payload=b"%f" % warm_s)
                             for _ in range(6)])
        wait_for(lambda: store.counts().get("completed", 0) == 6, 30, "the warm-up jobs")
        pair = client.enqueue_many([headgate.Envelope(kind="sleep", payload=b"0"),
                                    headgate.Envelope(kind="sleep", payload=b"%f" % second_s)])
        wait_for(lambda: store.counts().get("completed", 0) == 8, 30, "the pair")
    finally:
        assert worker.stop(drain_ms=1_000, timeout=15) == 0
    return pair[0], pair[1]


def test_acks_of_handlers_shorter_than_a_turn_share_one_turn(store: Store) -> None:
    """Attempts typically take ~50 ms and a turn ~150 ms: after the instant job's ack the
    dispatcher waits for its sibling (done ~20 ms later), and one call writes both."""
    proxy = SlowTurns(store, 0.15)
    instant, short = _pair_after_warm_up(proxy, store, 0.05, 0.02)
    assert [instant, short] in [sorted(b) for b in proxy.batches] or \
        [short, instant] in [sorted(b) for b in proxy.batches], proxy.batches[-4:]
    assert [instant] not in proxy.batches


def test_acks_of_handlers_longer_than_a_turn_are_not_held_back(store: Store) -> None:
    """Attempts typically take ~250 ms and a turn a few ms: the instant job's ack is
    written at once, not held for its sibling (done ~200 ms later). The attempts are
    long so that a turn slowed by a loaded machine (a PostgreSQL commit under CI's
    parallel tests took over 50 ms) still stays shorter than one."""
    proxy = Proxy(store)
    instant, longer = _pair_after_warm_up(proxy, store, 0.25, 0.2)
    assert [instant] in proxy.batches, proxy.batches[-4:]
    assert [longer] in proxy.batches


def test_empty_poll_backoff_stays_jittered_at_its_ceiling() -> None:
    """An idle fleet sits at the ceiling: clipping the jitter there would make half of
    it poll in lockstep at exactly the ceiling."""
    from headgate.worker.polling import Backoff

    backoff = Backoff(10, 1_000, jitter=0.2)
    for _ in range(10):  # 10, 20, ... past the ceiling
        backoff.next_ms()
    delays = [backoff.next_ms() for _ in range(2_000)]
    assert all(800 <= d <= 1_000 for d in delays)
    assert sum(d == 1_000 for d in delays) == 0
    assert min(delays) < 820 and max(delays) > 980  # the whole lower band is used
    backoff.reset()
    early = [Backoff(10, 1_000, jitter=0.2).next_ms() for _ in range(2_000)]
    assert min(early) < 8.2 and max(early) > 11.8  # below the ceiling: both ways
