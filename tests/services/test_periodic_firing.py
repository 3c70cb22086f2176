"""Periodic schedules: firing and run-now through
headgate.services.scheduling, events. Storage and the firing steps at the store port are
headgate/testing/conformance/test_port_periodic.py.

Real databases and real time: schedules tick every few hundred milliseconds and the
tests sleep through them. Where a test needs one exact tick it passes `now_ms` equal to
that (already past) tick, which the store accepts for any instant up to its clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import headgate
from headgate import Client, Store
from headgate.core import InvalidInput, NotFound
from headgate.core.records import ScheduleEventEntry
from headgate.services.client import EnqueueContext
from headgate.services.scheduling import fire_due_schedules, run_schedule_now, tick_job_id


def sched(id: str = "s1", spec: str = "@every:200", **fields: Any) -> dict[str, Any]:
    return {"id": id, "kind": "report", "spec": spec, "payload": b"p", **fields}


def wait_until(store: Store, at_ms: int) -> None:
    while store.now_ms() < at_ms:
        time.sleep(max(0.001, min(0.05, (at_ms - store.now_ms()) / 1000)))


def events(store: Store, sid: str, limit: int = 200) -> list[ScheduleEventEntry]:
    return store.list_schedule_events(sid, None, limit)


def periodic_jobs(all_jobs: Callable[..., list[headgate.Job]], store: Store,
                  sid: str) -> list[headgate.Job]:
    return sorted((j for j in all_jobs(store) if j.periodic_schedule_id == sid),
                  key=lambda j: j.periodic_tick_ms or 0)


# -- deleting a fired schedule ---------------------------------------------------------


def test_delete_keeps_events(store: Store) -> None:
    row = store.upsert_schedule(sched())
    wait_until(store, row.next_run_ms)
    assert fire_due_schedules(store, now_ms=row.next_run_ms) == 1
    store.delete_schedule("s1")
    assert store.get_schedule("s1") is None
    assert [e.outcome for e in events(store, "s1")] == ["enqueued"]
    with pytest.raises(NotFound):
        store.delete_schedule("s1")


# -- firing -------------------------------------------------------------------------


def test_fire_enqueues_with_deterministic_id_and_periodic_origin(store: Store) -> None:
    row = store.upsert_schedule(sched(queue="reports", priority=3, partition_key="t1",
                                      max_attempts=4, retention_ms=1000))
    tick = row.next_run_ms
    # Not due before its tick, evaluated as of instants the store clock has passed: the
    # tick is epoch-aligned, so it may come due a millisecond after the upsert.
    assert tick > row.updated_at_ms
    assert fire_due_schedules(store, now_ms=row.updated_at_ms) == 0
    wait_until(store, tick)
    assert fire_due_schedules(store, now_ms=tick - 1) == 0
    assert fire_due_schedules(store, now_ms=tick) == 1
    job = store.get_job(tick_job_id("s1", tick), include_payload=True)
    assert job is not None
    assert job.periodic_origin == {"schedule_id": "s1", "tick_ms": tick}
    assert (job.kind, job.payload, job.queue, job.priority, job.partition_key,
            job.max_attempts, job.retention_ms) == ("report", b"p", "reports", 3, "t1", 4,
                                                    1000)
    after = store.get_schedule("s1")
    assert after is not None
    assert after.next_run_ms == tick + 200
    assert after.last_enqueued_ms is not None
    (event,) = events(store, "s1")
    assert (event.schedule_id, event.tick_ms, event.job_id, event.outcome, event.reason) \
        == ("s1", tick, job.id, "enqueued", "scheduled")


def test_a_ticks_job_sorts_by_its_tick_among_other_jobs(store: Store) -> None:
    """Job lists page newest first by id: a tick's job lists after a job made after its
    tick and before one made before it (a `periodic:…` id sorted above both)."""
    before = Client(store).enqueue("other", b"x", queue="reports")
    time.sleep(0.002)
    row = store.upsert_schedule(sched(queue="reports", retention_ms=60_000))
    tick = row.next_run_ms
    wait_until(store, tick)
    assert fire_due_schedules(store, now_ms=tick) == 1
    wait_until(store, tick + 2)  # a later millisecond than the tick's
    after = Client(store).enqueue("other", b"x", queue="reports")
    listed = [j.id for j in store.list_jobs(headgate.JobFilter(queue="reports")).jobs]
    assert listed == [after, tick_job_id("s1", tick), before]


def test_crashed_tick_is_not_enqueued_twice(store: Store, all_jobs) -> None:
    """A previous scheduler enqueued the tick's job and died before advancing: the retry
    finds the job by its deterministic id and records `deduplicated`."""
    row = store.upsert_schedule(sched())
    tick = row.next_run_ms
    wait_until(store, tick)
    Client(store).enqueue("report", b"p", id=tick_job_id("s1", tick), retention_ms=0,
                          periodic_schedule_id="s1", periodic_tick_ms=tick)
    assert fire_due_schedules(store, now_ms=tick) == 0
    assert len(periodic_jobs(all_jobs, store, "s1")) == 1
    (event,) = events(store, "s1")
    assert (event.outcome, event.reason, event.job_id) == (
        "deduplicated", "exists", tick_job_id("s1", tick))
    assert store.get_schedule("s1").next_run_ms == tick + 200  # type: ignore[union-attr]


def test_concurrent_schedulers_enqueue_each_tick_once(
    store: Store, open_more, all_jobs
) -> None:
    """Two processes' schedulers firing the same due tick at once (e.g. across a duty
    lease hand-over) create one job."""
    row = store.upsert_schedule(sched(spec="@every:1000"))
    tick = row.next_run_ms
    others = [open_more() for _ in range(3)]
    wait_until(store, tick)
    barrier = threading.Barrier(len(others))
    counts: list[int] = []

    def fire(s: Store) -> None:
        barrier.wait()
        counts.append(fire_due_schedules(s, now_ms=tick))

    threads = [threading.Thread(target=fire, args=(s,)) for s in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 1
    assert [j.id for j in periodic_jobs(all_jobs, store, "s1")] == [tick_job_id("s1", tick)]
    outcomes = sorted(e.outcome for e in events(store, "s1"))
    assert outcomes.count("enqueued") == 1
    assert set(outcomes) <= {"enqueued", "deduplicated"}


def _run_and_delete(store: Store) -> list[int]:
    """Complete every available job; with retention 0 each is deleted at its ack.
    Returns the ticks of the jobs it ran."""
    ran: list[int] = []
    while claims := store.admit("w", ["default"], 100):
        for claim in claims:
            store.ack(claim, headgate.Outcome.SUCCESS)
            assert claim.job.id == tick_job_id("s1", claim.job.periodic_tick_ms or 0)
            ran.append(claim.job.periodic_tick_ms or 0)
    return ran


def _enqueued_ticks(store: Store, sid: str) -> list[int]:
    return sorted(e.tick_ms for e in events(store, sid) if e.outcome == "enqueued")


def test_stale_scheduler_does_not_reenqueue_ticks_that_ran_and_were_deleted(
    store: Store, open_more
) -> None:
    """Scheduler A read the due schedules; before A enqueued anything, B fired them and
    the jobs ran and (retention 0) were deleted. A's snapshot is stale: enqueueing its
    ticks again would run each twice."""
    row = store.upsert_schedule(sched(spec="@every:100", on_missed="backfill",
                                      backfill_limit=5))
    wait_until(store, row.next_run_ms + 450)
    other = open_more()
    ran: list[int] = []

    def twin_fires_first(context: EnqueueContext, batch: list, call_next) -> list[str]:
        if not ran:
            assert fire_due_schedules(other) >= 5
            ran.extend(_run_and_delete(other))
        return call_next(batch)

    assert fire_due_schedules(store, client=Client(store, middleware=[twin_fires_first])) == 0
    assert len(ran) >= 5
    assert _run_and_delete(store) == []  # nothing enqueued a second time
    assert sorted(e.tick_ms for e in events(store, "s1") if e.outcome == "enqueued") \
        == sorted(ran)


def test_a_scheduler_that_loses_its_lease_stops_and_the_next_continues(
    store: Store, open_more
) -> None:
    """Two schedulers with a backfilling schedule and retention 0: the first loses its
    duty lease mid-backfill, its jobs run and are deleted, the second fires; every tick
    is enqueued exactly once."""
    row = store.upsert_schedule(sched(spec="@every:50", on_missed="backfill",
                                      backfill_limit=20))
    wait_until(store, row.next_run_ms + 500)  # 11 ticks due
    asked: list[bool] = []

    def held_for_four_checks() -> bool:
        asked.append(len(asked) < 4)
        return asked[-1]

    first = fire_due_schedules(store, still_held=held_for_four_checks)
    assert 1 <= first < 11
    assert store.get_schedule("s1").next_run_ms < store.now_ms()  # type: ignore[union-attr]
    ran = _run_and_delete(store)
    assert len(ran) == first
    later = open_more()
    assert fire_due_schedules(later) >= 11 - first
    ran += _run_and_delete(later)
    ticks = _enqueued_ticks(store, "s1")
    assert sorted(ran) == ticks
    assert ticks == list(range(row.next_run_ms, ticks[-1] + 1, 50))  # none twice
    assert fire_due_schedules(store, still_held=lambda: False) == 0


def test_schedule_without_a_next_tick_is_paused_not_refired(store: Store) -> None:
    """A spec stored before validation rejected it has no next tick: the schedule was
    left due and failed again on every scheduler tick."""
    row = store.upsert_schedule(sched(spec="@every:100"))
    with store.db.write() as (conn, _):  # type: ignore[attr-defined]
        conn.execute("UPDATE schedules SET spec = ? WHERE id = ?", ("0 0 30 2 *", "s1"))
    wait_until(store, row.next_run_ms)
    assert fire_due_schedules(store) == 0
    assert fire_due_schedules(store) == 0
    assert store.get_schedule("s1").paused is True  # type: ignore[union-attr]
    assert [(e.outcome, e.reason, e.tick_ms) for e in events(store, "s1")] == [
        ("failed", "no_next_tick", row.next_run_ms)]


def test_paused_schedule_does_not_fire_and_resume_does_not_replay(store: Store) -> None:
    row = store.upsert_schedule(sched(spec="@every:100", paused=True))
    wait_until(store, row.next_run_ms + 350)
    assert fire_due_schedules(store) == 0
    assert events(store, "s1") == []
    resumed = store.upsert_schedule(sched(spec="@every:100", paused=False))
    assert resumed.next_run_ms > row.next_run_ms + 300
    assert fire_due_schedules(store, now_ms=resumed.updated_at_ms) == 0


def test_events_bounded_to_newest_100_and_paged(store: Store, all_jobs) -> None:
    # 10 ms ticks, backfill up to 150 of them after a 1.6 s pause: many ticks, cheaply.
    row = store.upsert_schedule(sched(spec="@every:10", on_missed="backfill",
                                      backfill_limit=150))
    wait_until(store, row.next_run_ms + 1600)
    assert fire_due_schedules(store) == 150
    jobs = periodic_jobs(all_jobs, store, "s1")
    assert len(jobs) == 150
    ticks = [j.periodic_tick_ms for j in jobs]
    assert ticks == list(range(ticks[0], ticks[0] + 1500, 10))
    newest = events(store, "s1", 1000)
    assert len(newest) == 100
    assert [e.tick_ms for e in newest] == sorted(ticks, reverse=True)[:100]
    assert [e.event_id for e in newest] == sorted((e.event_id for e in newest),
                                                     reverse=True)
    # Keyset pages: 30 + 30 + 30 + 10, no overlap, same order.
    pages, cursor = [], None
    while True:
        page = store.list_schedule_events("s1", cursor, 30)
        pages.extend(page)
        if len(page) < 30:
            break
        cursor = page[-1].event_id
    assert pages == newest
    # More events keep the bound: each run-now adds one.
    for i in range(5):
        run_schedule_now(store, "s1", f"key-{i}")
    after = events(store, "s1", 1000)
    assert len(after) == 100
    assert [e.reason for e in after[:5]] == ["run_now"] * 5


def test_missed_ticks_recovery_per_policy(store: Store, all_jobs) -> None:
    """The scheduler runs, stops for ~6 ticks, then runs again."""
    for policy in ("skip", "run_once", "backfill"):
        store.upsert_schedule(sched(id=policy, spec="@every:200", on_missed=policy,
                                    backfill_limit=3))
    start = max(s.next_run_ms for s in store.list_schedules())
    wait_until(store, start + 50)
    # On time: one each (evaluated as of start + 50 however slow this machine is).
    assert fire_due_schedules(store, now_ms=start + 50, misfire_grace_ms=500) == 3
    stopped_at = store.now_ms()
    wait_until(store, stopped_at + 1250)  # scheduler down: 6 ticks go by
    now = store.now_ms()
    latest = now // 200 * 200
    assert fire_due_schedules(store, now_ms=now, misfire_grace_ms=500) == 1 + 3

    skip = periodic_jobs(all_jobs, store, "skip")
    assert len(skip) == 1  # only the on-time tick before the outage
    assert [(e.outcome, e.reason, e.tick_ms) for e in events(store, "skip")][0] == (
        "skipped", "missed", latest)

    once = periodic_jobs(all_jobs, store, "run_once")
    assert [j.periodic_tick_ms for j in once][1:] == [latest]

    fill = periodic_jobs(all_jobs, store, "backfill")
    assert [j.periodic_tick_ms for j in fill][1:] == [latest - 400, latest - 200, latest]
    assert [e.reason for e in events(store, "backfill")][:3] == [
        "scheduled", "backfill", "backfill"]
    # The older due ticks were left out: the newest of them says so.
    assert [(e.outcome, e.reason, e.tick_ms, e.job_id)
            for e in events(store, "backfill")][3] == (
        "skipped", "backfill_limit", latest - 600, None)

    for policy in ("skip", "run_once", "backfill"):
        assert store.get_schedule(policy).next_run_ms == latest + 200  # type: ignore[union-attr]
    # Back on time, skip fires normally again.
    wait_until(store, latest + 250)
    assert fire_due_schedules(store, now_ms=latest + 250, misfire_grace_ms=500) == 3
    assert len(periodic_jobs(all_jobs, store, "skip")) == 2


def test_run_once_collapses_and_skip_within_grace_fires_latest(store: Store, all_jobs) -> None:
    for policy in ("skip", "run_once"):
        store.upsert_schedule(sched(id=policy, spec="@every:100", on_missed=policy))
    start = max(s.next_run_ms for s in store.list_schedules())
    wait_until(store, start + 450)  # ~5 ticks due, but within the default 60 s grace
    now = store.now_ms()
    assert fire_due_schedules(store, now_ms=now) == 2
    for policy in ("skip", "run_once"):
        assert [j.periodic_tick_ms for j in periodic_jobs(all_jobs, store, policy)] == [
            now // 100 * 100]


def test_enqueue_authorizer_sees_periodic_jobs(store: Store, all_jobs) -> None:
    seen: list[tuple[str, str]] = []

    def authorizer(context: EnqueueContext, env: headgate.Envelope) -> bool:
        seen.append((context.source, env.kind))
        return env.kind != "forbidden-kind"

    client = Client(store, authorizer=authorizer)
    store.upsert_schedule(sched(id="ok", kind="report"))
    store.upsert_schedule(sched(id="no", kind="forbidden-kind"))
    wait_until(store, max(s.next_run_ms for s in store.list_schedules()))
    assert fire_due_schedules(store, client=client) == 1
    assert ("periodic", "report") in seen and ("periodic", "forbidden-kind") in seen
    (event,) = events(store, "no")
    assert (event.outcome, event.reason, event.job_id) == (
        "failed", "forbidden", None)
    assert periodic_jobs(all_jobs, store, "no") == []
    # A failed tick is recorded and the schedule still advances.
    assert store.get_schedule("no").next_run_ms > event.tick_ms  # type: ignore[union-attr]


def test_middleware_and_hooks_apply_to_periodic_jobs(store: Store) -> None:
    calls: list[str] = []

    def tag_it(context, batch, call_next):
        calls.append(context.source)
        return call_next([headgate.Envelope(**{**_env_fields(e), "tags": ("cron",)})
                          for e in batch])

    row = store.upsert_schedule(sched())
    wait_until(store, row.next_run_ms)
    fire_due_schedules(store, now_ms=row.next_run_ms,
                       client=Client(store, middleware=[tag_it]))
    assert calls == ["periodic"]
    job = store.get_job(tick_job_id("s1", row.next_run_ms))
    assert job is not None and job.tags == ("cron",)


def _env_fields(env: headgate.Envelope) -> dict[str, Any]:
    return {f: getattr(env, f) for f in env.__dataclass_fields__}


def test_backpressure_and_quarantine_are_recorded_as_failed(store: Store, quarantine) -> None:
    fp_payload = b"poison"
    quarantine(store, "report", fp_payload)
    store.upsert_schedule(sched(id="full", queue="full"))
    store.upsert_schedule(sched(id="poison", payload=fp_payload))
    store.set_enqueue_limit("full", 0)
    wait_until(store, max(s.next_run_ms for s in store.list_schedules()))
    assert fire_due_schedules(store) == 0
    assert [(e.outcome, e.reason) for e in events(store, "full")] == [
        ("failed", "backpressure")]
    assert [(e.outcome, e.reason) for e in events(store, "poison")] == [
        ("failed", "quarantined")]


def test_edited_schedule_after_enqueue_counts_as_deduplicated(store: Store) -> None:
    row = store.upsert_schedule(sched())
    tick = row.next_run_ms
    wait_until(store, tick)
    Client(store).enqueue("report", b"old payload", id=tick_job_id("s1", tick))
    assert fire_due_schedules(store, now_ms=tick) == 0
    (event,) = events(store, "s1")
    assert (event.outcome, event.reason) == ("deduplicated", "id_conflict")


def test_now_ms_cannot_be_in_the_future(store: Store) -> None:
    with pytest.raises(InvalidInput, match="now_ms"):
        fire_due_schedules(store, now_ms=store.now_ms() + 60_000)


# -- run now ------------------------------------------------------------------------


def test_run_now_enqueues_one_extra_job_and_dedups_per_key(store: Store, all_jobs) -> None:
    row = store.upsert_schedule(sched(spec="@every:3600000"))
    job_id, replayed = run_schedule_now(store, "s1", "click-1")
    assert not replayed
    assert run_schedule_now(store, "s1", "click-1") == (job_id, True)
    other, replayed = run_schedule_now(store, "s1", "click-2")
    assert other != job_id and not replayed
    jobs = periodic_jobs(all_jobs, store, "s1")
    assert sorted(j.id for j in jobs) == sorted([job_id, other])
    job = store.get_job(job_id)
    assert job is not None and job.periodic_origin is not None
    assert job.periodic_origin["schedule_id"] == "s1"
    after = store.get_schedule("s1")
    assert after is not None
    assert after.next_run_ms == row.next_run_ms
    assert after.last_enqueued_ms is not None
    assert [(e.outcome, e.reason) for e in events(store, "s1")] == [
        ("enqueued", "run_now"), ("enqueued", "run_now")]


def test_a_run_now_job_sorts_by_its_age_among_other_jobs(store: Store) -> None:
    """Job lists page newest first by id: a run-now job lists between the jobs made
    before and after it (a `periodic:…:run:…` id sorted above both, for as long as the
    job was kept)."""
    store.upsert_schedule(sched(spec="@every:3600000", queue="reports",
                                retention_ms=60_000))
    before = Client(store).enqueue("other", b"x", queue="reports")
    time.sleep(0.002)
    run, _ = run_schedule_now(store, "s1", "click")
    time.sleep(0.002)
    after = Client(store).enqueue("other", b"x", queue="reports")
    listed = [j.id for j in store.list_jobs(headgate.JobFilter(queue="reports")).jobs]
    assert listed == [after, run, before]


def test_concurrent_run_now_calls_with_one_key_make_one_job(
    store: Store, open_more, all_jobs
) -> None:
    """Calls racing with one Idempotency-Key (a client retrying before the first answer
    came back), both past the replay lookup before either enqueues, get the one job the
    first made; only that call says it enqueued."""
    store.upsert_schedule(sched(spec="@every:3600000"))
    barrier = threading.Barrier(2)

    def together(context: EnqueueContext, batch: list, call_next) -> list[str]:
        barrier.wait(timeout=10)
        return call_next(batch)

    answers: list[tuple[str, bool]] = []

    def run(s: Store) -> None:
        answers.append(run_schedule_now(s, "s1", "double-click",
                                        client=Client(s, middleware=[together])))

    threads = [threading.Thread(target=run, args=(open_more(),)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (job,) = periodic_jobs(all_jobs, store, "s1")
    assert sorted(answers) == [(job.id, False), (job.id, True)]
    assert run_schedule_now(store, "s1", "double-click") == (job.id, True)
    assert sorted(e.outcome for e in events(store, "s1")) == ["deduplicated", "enqueued"]


def test_run_now_replay_survives_job_deletion(store: Store) -> None:
    store.upsert_schedule(sched(spec="@every:3600000", retention_ms=0))
    job_id, _ = run_schedule_now(store, "s1", "k")
    store.delete_job(job_id)
    assert run_schedule_now(store, "s1", "k") == (job_id, True)
    assert store.get_job(job_id) is None


def test_run_now_errors(store: Store) -> None:
    with pytest.raises(NotFound):
        run_schedule_now(store, "missing", "k")
    store.upsert_schedule(sched(queue="closed"))
    with pytest.raises(InvalidInput):
        run_schedule_now(store, "s1", "")
    store.set_enqueue_limit("closed", 0)
    with pytest.raises(headgate.core.Backpressure):
        run_schedule_now(store, "s1", "k")
    assert [(e.outcome, e.reason) for e in events(store, "s1")] == [
        ("failed", "backpressure")]
    denied = Client(store, authorizer=lambda ctx, env: ctx.source != "http")
    with pytest.raises(headgate.core.EnqueueForbidden):
        run_schedule_now(store, "s1", "k2", client=denied,
                               context=EnqueueContext(source="http", identity="bob"))
