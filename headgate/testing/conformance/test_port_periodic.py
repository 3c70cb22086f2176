"""Periodic schedules at the port: storage (upsert, validation, re-anchoring)
and the one-transaction steps the scheduler service (headgate/services/scheduling.py) fires
with: due_schedules, enqueue_tick with its compare-and-set step, record_schedule_events,
park_schedule and the run-now keys. Firing policy itself is
tests/services/test_periodic_firing.py."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from headgate import Envelope, Store
from headgate.core import Backpressure, InvalidInput, NotFound
from headgate.core.records import Schedule
from headgate.core.schedule_spec import next_after
from headgate.store.port import ScheduleStep


def sched(id: str = "s1", spec: str = "@every:200", **fields: Any) -> dict[str, Any]:
    return {"id": id, "kind": "report", "spec": spec, "payload": b"p", **fields}


def wait_until(store: Store, at_ms: int) -> None:
    while store.now_ms() < at_ms:
        time.sleep(0.01)


def tick_envelope(sid: str, tick: int, **fields: Any) -> Envelope:
    return Envelope(kind="report", payload=b"p", id=f"periodic:{sid}:{tick}",
                    periodic_schedule_id=sid, periodic_tick_ms=tick, **fields)


def step_of(row: Schedule) -> ScheduleStep:
    """The step past `row`'s next tick, as the scheduler would take it."""
    return ScheduleStep(row.id, row.spec, row.next_run_ms, next_after(row.spec, row.next_run_ms))


def outcomes(store: Store, sid: str) -> list[tuple[int, str | None, str, str]]:
    return [(e.tick_ms, e.job_id, e.outcome, e.reason)
            for e in store.list_schedule_events(sid, None, 200)]


# -- storage ----------------------------------------------------------------------------


def test_upsert_returns_the_stored_schedule_with_defaults(store: Store) -> None:
    before = store.now_ms()
    row = store.upsert_schedule({"id": "daily", "kind": "report", "spec": "0 3 * * *"})
    assert row.next_run_ms == next_after("0 3 * * *", row.updated_at_ms)
    assert row.next_run_ms > before
    assert row == Schedule(
        id="daily", kind="report", payload=b"", queue="default", partition_key="",
        rate_class="", priority=0, max_attempts=25, retention_ms=0, spec="0 3 * * *",
        next_run_ms=row.next_run_ms, last_enqueued_ms=None, on_missed="skip",
        backfill_limit=0, paused=False, created_at_ms=row.created_at_ms,
        updated_at_ms=row.updated_at_ms)
    assert before <= row.created_at_ms == row.updated_at_ms <= store.now_ms()
    assert store.get_schedule("daily") == row
    assert store.list_schedules() == [row]
    assert store.get_schedule("nope") is None


def test_unchanged_spec_keeps_next_run_changed_spec_reanchors(store: Store) -> None:
    first = store.upsert_schedule(sched(spec="@every:3600000", priority=1))
    time.sleep(0.02)
    # Same spec, other fields edited: the next tick does not move.
    again = store.upsert_schedule(sched(spec="@every:3600000", priority=7, queue="q2"))
    assert again.next_run_ms == first.next_run_ms
    assert (again.priority, again.queue) == (7, "q2")
    assert again.created_at_ms == first.created_at_ms
    # A schedule read back from the store round-trips (the store's own fields are
    # ignored), as does one edited with dataclasses.replace.
    assert store.upsert_schedule(again).next_run_ms == first.next_run_ms
    assert store.upsert_schedule(replace(again, priority=8)).priority == 8
    # A changed spec re-anchors to its own first tick after now.
    changed = store.upsert_schedule(sched(spec="@every:7000"))
    assert changed.next_run_ms % 7000 == 0
    assert changed.next_run_ms == next_after("@every:7000", changed.updated_at_ms)
    tz = store.upsert_schedule(sched(spec="CRON_TZ=Europe/Paris 0 9 * * MON-FRI"))
    assert tz.next_run_ms == next_after(tz.spec, tz.updated_at_ms)


@pytest.mark.parametrize(("fields", "words"), [
    ({"spec": "* * *"}, "5 fields"),
    ({"spec": "CRON_TZ=Nowhere/Land 0 * * * *"}, "Nowhere/Land"),
    ({"spec": "CRON_TZ=UTC @every:1000"}, "CRON_TZ"),
    ({"spec": "@every:0"}, "@every"),
    ({"on_missed": "sometimes"}, "on_missed must be skip|run_once|backfill"),
    ({"backfill_limit": -1}, "backfill_limit"),
    ({"backfill_limit": 10**6}, "backfill_limit"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"retention_ms": -5}, "retention_ms"),
    ({"priority": "high"}, "priority"),
    ({"paused": "yes"}, "paused"),
    ({"queue": ""}, "queue"),
    ({"kind": ""}, "kind"),
    ({"payload": b"x" * (1024 * 1024 + 1)}, "payload"),
    ({"payload": "text"}, "payload"),
    ({"id": ""}, "id"),
    ({"id": "x" * 201}, "id"),
    ({"colour": "red"}, "unknown schedule field: colour"),
])
def test_invalid_schedules_are_rejected_naming_the_problem(
    store: Store, fields: dict[str, Any], words: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        store.upsert_schedule({**sched(), **fields})
    assert words in str(info.value)
    assert store.list_schedules() == []


def test_missing_required_field(store: Store) -> None:
    with pytest.raises(InvalidInput, match="spec is required"):
        store.upsert_schedule({"id": "a", "kind": "k"})


def test_a_paused_schedule_resumed_re_anchors_after_now(store: Store) -> None:
    first = store.upsert_schedule(sched(spec="@every:100"))
    store.upsert_schedule(sched(spec="@every:100", paused=True))
    wait_until(store, first.next_run_ms + 300)
    resumed = store.upsert_schedule(sched(spec="@every:100", paused=False))
    assert resumed.paused is False
    assert resumed.next_run_ms == next_after("@every:100", resumed.updated_at_ms)
    assert resumed.next_run_ms > first.next_run_ms + 300  # the missed ticks are gone


# -- due schedules ----------------------------------------------------------------------


def test_due_schedules_are_the_unpaused_ones_whose_tick_came_most_overdue_first(
    store: Store,
) -> None:
    rows = [store.upsert_schedule(sched(f"s{i}", spec=f"@every:{every}"))
            for i, every in enumerate((110, 170, 230))]
    store.upsert_schedule(sched("paused", spec="@every:100", paused=True))
    store.upsert_schedule(sched("later", spec="@every:3600000"))
    latest = max(r.next_run_ms for r in rows)
    wait_until(store, latest)
    due = store.due_schedules(store.now_ms(), 10)
    by_due = sorted(rows, key=lambda r: r.next_run_ms)
    assert [d.id for d in due] == [r.id for r in by_due]
    assert due == [store.get_schedule(r.id) for r in by_due]  # full wire rows
    assert [d.id for d in store.due_schedules(store.now_ms(), 2)] == [
        r.id for r in by_due[:2]]
    # As of an earlier instant only what was due then. Ticks are epoch-aligned, so
    # another schedule may share the first one (110 and 230 ms meet every 2,530 ms).
    first = by_due[0].next_run_ms
    assert sorted(d.id for d in store.due_schedules(first, 10)) == [
        r.id for r in rows if r.next_run_ms == first]
    assert store.due_schedules(first - 1, 10) == []


# -- enqueue_tick -----------------------------------------------------------------------


def test_a_tick_is_inserted_and_the_schedule_moved_in_one_step(store: Store) -> None:
    row = store.upsert_schedule(sched())
    tick = row.next_run_ms
    step = step_of(row)
    done = store.enqueue_tick([tick_envelope("s1", tick)], step)
    assert (done.ids, done.inserted, done.duplicate, done.moved) == (
        [f"periodic:s1:{tick}"], frozenset({f"periodic:s1:{tick}"}), None, False)
    job = store.get_job(done.ids[0])
    assert job is not None and job.periodic_schedule_id == "s1"
    assert job.periodic_tick_ms == tick
    moved = store.get_schedule("s1")
    assert moved is not None and moved.next_run_ms == step.to
    assert moved.last_enqueued_ms is not None


def test_a_stale_step_writes_nothing_and_says_moved(store: Store) -> None:
    row = store.upsert_schedule(sched())
    tick = row.next_run_ms
    assert not store.enqueue_tick([tick_envelope("s1", tick)], step_of(row)).moved
    # A twin scheduler read the same row before the first one committed.
    late = store.enqueue_tick([tick_envelope("s1", tick + 1)], step_of(row))
    assert late.moved and late.ids == [] and late.inserted == frozenset()
    assert store.get_job(f"periodic:s1:{tick + 1}") is None
    after = store.get_schedule("s1")
    assert after is not None and after.next_run_ms == step_of(row).to


def test_an_edit_re_anchoring_the_schedule_fails_the_step(store: Store) -> None:
    row = store.upsert_schedule(sched(spec="@every:3600000"))
    store.upsert_schedule(sched(spec="@every:7200000"))  # spec changed since read
    done = store.enqueue_tick([tick_envelope("s1", row.next_run_ms)], step_of(row))
    assert done.moved
    assert store.get_job(f"periodic:s1:{row.next_run_ms}") is None


def test_an_existing_tick_job_is_reported_as_not_inserted(store: Store) -> None:
    row = store.upsert_schedule(sched())
    env = tick_envelope("s1", row.next_run_ms)
    store.enqueue_tick([env])
    again = store.enqueue_tick([env])
    assert again.ids == [env.id] and again.inserted == frozenset() and not again.moved
    assert sum(store.counts().values()) == 1
    unmoved = store.get_schedule("s1")
    assert unmoved is not None and unmoved.next_run_ms == row.next_run_ms


def test_a_unique_key_duplicate_is_answered_and_the_step_still_commits(store: Store) -> None:
    row = store.upsert_schedule(sched())
    holder = store.enqueue_many([Envelope(kind="report", payload=b"x", unique_key=b"one")])[0]
    tick = row.next_run_ms
    done = store.enqueue_tick([tick_envelope("s1", tick, unique_key=b"one")], step_of(row))
    assert done.duplicate is not None and done.duplicate.existing_id == holder
    assert not done.moved and store.get_job(f"periodic:s1:{tick}") is None
    after = store.get_schedule("s1")
    assert after is not None and after.next_run_ms == step_of(row).to


def test_a_refused_tick_rolls_the_step_back(store: Store) -> None:
    row = store.upsert_schedule(sched())
    store.set_enqueue_limit("default", 0)
    with pytest.raises(Backpressure):
        store.enqueue_tick([tick_envelope("s1", row.next_run_ms)], step_of(row))
    after = store.get_schedule("s1")
    assert after is not None and after.next_run_ms == row.next_run_ms
    assert after.last_enqueued_ms is None


# -- events, parking, run-now keys ------------------------------------------------------


def test_recorded_events_page_newest_first_and_the_step_moves_the_schedule(
    store: Store,
) -> None:
    row = store.upsert_schedule(sched())
    tick = row.next_run_ms
    events = [(tick + i, None, "skipped", "missed") for i in range(5)]
    store.record_schedule_events("s1", events, step_of(row), enqueued=False)
    after = store.get_schedule("s1")
    assert after is not None and after.next_run_ms == step_of(row).to
    assert after.last_enqueued_ms is None  # enqueued=False leaves it
    first = store.list_schedule_events("s1", None, 2)
    assert [e.tick_ms for e in first] == [tick + 4, tick + 3]
    rest = store.list_schedule_events("s1", first[-1].event_id, 10)
    assert [e.tick_ms for e in rest] == [tick + 2, tick + 1, tick]
    assert {e.schedule_id for e in first + rest} == {"s1"}
    # A stale step records its events but does not move the schedule again.
    store.record_schedule_events("s1", [(tick, "j", "enqueued", "scheduled")],
                                 step_of(row), enqueued=True)
    again = store.get_schedule("s1")
    assert again is not None and again.next_run_ms == step_of(row).to
    assert again.last_enqueued_ms is None
    assert outcomes(store, "s1")[0] == (tick, "j", "enqueued", "scheduled")


def test_park_pauses_unless_the_schedule_moved(store: Store) -> None:
    row = store.upsert_schedule(sched())
    stale = row.next_run_ms - 1
    assert not store.park_schedule("s1", row.spec, stale, [(stale, None, "failed", "x")])
    kept = store.get_schedule("s1")
    assert kept is not None and kept.paused is False and outcomes(store, "s1") == []
    event = (row.next_run_ms, None, "failed", "no_next_tick")
    assert store.park_schedule("s1", row.spec, row.next_run_ms, [event])
    parked = store.get_schedule("s1")
    assert parked is not None and parked.paused is True
    assert outcomes(store, "s1") == [event]
    assert store.due_schedules(store.now_ms() + 10**9, 10) == []


def test_a_run_now_key_remembers_the_first_job_recorded(store: Store) -> None:
    store.upsert_schedule(sched())
    assert store.find_schedule_run("s1", "key-1") is None
    tick = store.now_ms()
    first = store.remember_schedule_run("s1", "key-1", "job-a",
                                        (tick, "job-a", "enqueued", "run_now"), True)
    assert first == "job-a"
    after = store.get_schedule("s1")
    assert after is not None and after.last_enqueued_ms is not None
    # A concurrent twin with the same key is told the first job.
    assert store.remember_schedule_run("s1", "key-1", "job-b",
                                       (tick, "job-b", "deduplicated", "run_now"),
                                       False) == "job-a"
    assert store.find_schedule_run("s1", "key-1") == "job-a"
    assert store.find_schedule_run("s1", "key-2") is None
    assert [o[1] for o in outcomes(store, "s1")] == ["job-b", "job-a"]


def test_schedule_event_pages_are_checked(store: Store) -> None:
    with pytest.raises(InvalidInput, match="limit"):
        store.list_schedule_events("s1", None, 0)
    with pytest.raises(InvalidInput, match="cursor"):
        store.list_schedule_events("s1", -1, 10)
    assert store.list_schedule_events("never", None, 10) == []


def test_a_deleted_schedule_is_gone_but_its_events_are_kept(store: Store) -> None:
    row = store.upsert_schedule(sched())
    store.upsert_schedule(sched("other"))
    event = (row.next_run_ms, "j", "enqueued", "scheduled")
    store.record_schedule_events("s1", [event])
    store.delete_schedule("s1")
    assert store.get_schedule("s1") is None
    assert [s.id for s in store.list_schedules()] == ["other"]
    assert outcomes(store, "s1") == [event]
    assert store.due_schedules(store.now_ms() + 10**9, 10)[0].id == "other"
    with pytest.raises(NotFound):
        store.delete_schedule("s1")
