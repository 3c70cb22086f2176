"""app.testing() moves time only when told: a retry's backoff and a delay_ms come due
after t.advance(...) (or run_all(fast_forward=True)) without the test sleeping through
them, and stay waiting without it. The session's clock is the throw-away SQLite store's
own clock, moved by an offset, so the store computes backoffs from the moved time and
the app starts delays from it too."""

from __future__ import annotations

import time

import pytest

import headgate
from headgate import InvalidInput, State

HOUR_MS = 3_600_000


def flaky_app() -> tuple[headgate.App, headgate.Task[[], str], list[int]]:
    """A task that fails its first attempt, then succeeds; its retry waits an hour."""
    app = headgate.App()
    runs: list[int] = []

    @app.task(retry=headgate.Backoff(base_ms=HOUR_MS, max_ms=HOUR_MS, jitter=0))
    def flaky() -> str:
        runs.append(headgate.tasks.current().attempt)
        if len(runs) == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    return app, flaky, runs


def test_a_retry_after_an_hour_of_backoff_runs_once_the_clock_is_advanced() -> None:
    app, flaky, runs = flaky_app()
    with app.testing() as t:
        ref = flaky.enqueue()
        t.run_all()
        job = t.store.get_job(ref.id)
        assert runs == [0] and job.state is State.RETRYABLE
        # The backoff counts from the store's clock.
        assert job.scheduled_at_ms - t.now_ms() > HOUR_MS - 60_000
        t.run_all()  # no time has passed: still waiting, not run again
        assert runs == [0] and ref.state() is State.RETRYABLE
        t.advance(minutes=59)
        t.run_all()
        assert runs == [0] and ref.state() is State.RETRYABLE
        t.advance(minutes=1)
        t.run_all()
        assert ref.result(timeout=5) == "ok"
        assert runs == [0, 1]


def test_run_all_fast_forward_runs_through_the_backoff() -> None:
    app, flaky, runs = flaky_app()
    with app.testing() as t:
        start = t.now_ms()
        ref = flaky.enqueue()
        t.run_all(fast_forward=True)
        assert ref.result(timeout=5) == "ok" and runs == [0, 1]
        assert t.now_ms() - start >= HOUR_MS
        assert t.jobs(state="retryable") == [] and t.jobs(state="scheduled") == []


def test_fast_forward_takes_a_task_through_all_of_its_attempts() -> None:
    app = headgate.App()

    @app.task(max_attempts=4)  # the default backoff, computed by the store
    def broken() -> None:
        raise ValueError("never works")

    with app.testing() as t:
        ref = broken.enqueue()
        t.run_all(fast_forward=True)
        job = t.store.get_job(ref.id)
        assert job.state is State.ARCHIVED and job.attempt == 4
        with pytest.raises(headgate.JobFailed, match="archived: .*never works"):
            ref.result(timeout=5)


def test_a_delayed_job_waits_until_the_clock_reaches_its_delay() -> None:
    app = headgate.App()

    @app.task
    def greet(name: str) -> str:
        return f"hello {name}"

    with app.testing() as t:
        ref = greet.options(delay_ms=10 * 60_000).enqueue("ada")
        t.run_all()
        assert ref.state() is State.SCHEDULED
        t.advance(minutes=9, seconds=59)
        t.run_all()
        assert ref.state() is State.SCHEDULED
        t.advance(seconds=1)
        t.run_all()
        assert ref.result(timeout=5) == "hello ada"

        # A delay counts from the session's (moved) time, not the wall clock: a job
        # delayed a minute after a day's advance is not due at once.
        t.advance(days=1)
        later = greet.options(delay_ms=60_000).enqueue("bob")
        assert t.store.get_job(later.id).scheduled_at_ms > time.time() * 1000 + 23 * HOUR_MS
        t.run_all()
        assert later.state() is State.SCHEDULED
        t.run_all(fast_forward=True)
        assert later.result(timeout=5) == "hello bob"

    # Outside the session, delays count from the wall clock again.
    assert app.clock_offset_ms == 0


def test_a_backoff_after_an_advance_counts_from_the_moved_clock() -> None:
    app = headgate.App()

    @app.task  # the store's default backoff: about a second
    def fails_once(marker: list[int] | None = None) -> None:
        raise RuntimeError("again")

    with app.testing() as t:
        t.advance(hours=30)
        ref = fails_once.enqueue()
        t.run_all()
        job = t.store.get_job(ref.id)
        assert job.state is State.RETRYABLE
        assert job.scheduled_at_ms > time.time() * 1000 + 29 * HOUR_MS


def test_a_periodic_task_fires_when_the_clock_reaches_its_tick() -> None:
    app = headgate.App()
    ran: list[str] = []

    @app.periodic("@every:3600000", id="hourly", retention_ms=HOUR_MS)
    def hourly() -> str:
        ran.append("tick")
        return "done"

    with app.testing() as t:
        t.run_all()
        assert ran == [] and t.jobs() == []
        tick = t.store.get_schedule("hourly").next_run_ms
        t.advance(ms=tick - t.now_ms())
        t.run_all()
        assert ran == ["tick"]
        assert [j.state for j in t.jobs(kind=hourly.name)] == [State.COMPLETED]


@pytest.mark.parametrize("bad", [{"seconds": -1}, {"ms": True}, {"hours": float("nan")},
                                 {"days": float("inf")}, {"minutes": "1"}])
def test_advance_takes_finite_amounts_forward_only(bad: dict[str, object]) -> None:
    app = headgate.App()
    with app.testing() as t:
        before = t.now_ms()
        with pytest.raises(InvalidInput, match="advance"):
            t.advance(**bad)  # type: ignore[arg-type]
        assert t.now_ms() - before < 60_000  # nothing moved


def test_fast_forward_stops_at_jobs_a_paused_queue_holds() -> None:
    """A delayed job of a paused queue comes due and then waits for the queue, not for
    a time: fast_forward moves the clock once and returns instead of spinning."""
    app = headgate.App()

    @app.task(queue="held")
    def later() -> str:
        return "ran"

    with app.testing() as t:
        t.store.set_queue_paused("held", True)
        ref = later.options(delay_ms=HOUR_MS).enqueue()
        t.run_all(timeout=10, fast_forward=True)
        assert ref.state() is State.AVAILABLE
        t.store.set_queue_paused("held", False)
        t.run_all()
        assert ref.result(timeout=5) == "ran"
