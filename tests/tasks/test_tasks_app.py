"""The task layer in the test's own process: declaring and encoding (bad input is a
typed error and stores nothing), app.testing() with real admission, the store's
finished-job signal, and App's store selection."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import headgate
from headgate import InvalidInput, Store
from headgate.tasks import EncodeError, UnknownOption


def make_app(store: Store) -> headgate.App:
    app = headgate.App(store=store)

    @app.task(queue="mail", partition=lambda to, **_: to.rsplit("@", 1)[-1])
    def send(to: str, subject: str = "") -> str:
        return f"sent {subject} to {to}"

    return app


def test_kind_is_the_import_path_unless_named(store: Store) -> None:
    app = make_app(store)
    assert list(app.tasks) == [f"{__name__}.make_app.<locals>.send"]

    @app.task(name="mail.digest")
    def digest() -> None: ...

    assert digest.name == "mail.digest"
    ref = app.tasks[f"{__name__}.make_app.<locals>.send"].enqueue("a@example.com")
    job = store.get_job(ref.id)
    assert job.partition_key == "example.com" and job.queue == "mail"


def test_bad_input_is_a_typed_error_and_stores_nothing(store: Store) -> None:
    app = make_app(store)
    send = next(iter(app.tasks.values()))
    with pytest.raises(InvalidInput, match="already declared"):
        app.task(name=send.name)(lambda: None)
    with pytest.raises(EncodeError) as codec:
        send.enqueue("a@example.com", subject=object())  # type: ignore[arg-type]
    assert isinstance(codec.value, TypeError)
    with pytest.raises(EncodeError):
        send.enqueue("a@example.com", subject=float("nan"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="partition callable raised AttributeError"):
        send.enqueue(42)  # type: ignore[arg-type]

    @app.task(partition=lambda n: n)
    def numbered(n: int) -> None: ...

    with pytest.raises(InvalidInput, match="returned int, not a string"):
        numbered.enqueue(7)
    with pytest.raises(UnknownOption, match="'prio'") as option:
        send.options(prio=5)
    assert isinstance(option.value, TypeError)
    with pytest.raises(UnknownOption, match="'tiemout_ms'"):
        app.task(tiemout_ms=5)(lambda: None)
    with pytest.raises(TypeError, match="missing a required argument"):
        send.enqueue()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="enqueue_many takes task.call"):
        send.enqueue_many(["a@example.com"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match="priority"):
        send.options(priority="high").enqueue("a@example.com")
    assert sum(store.counts().values()) == 0


def test_periodic_args_that_do_not_fit_the_function_are_refused_at_declaration(
        store: Store) -> None:
    """Each tick calls the function with the schedule's args: a call that cannot bind
    (or encode) is refused where it is declared, not failed and retried on every tick;
    neither the task nor the schedule is kept."""
    app = headgate.App(store=store)

    def scale(n: int) -> int:
        return n * 2

    with pytest.raises(TypeError, match="too many positional arguments"):
        app.periodic("@every:1000", name="ticks.scale", args=(1, 2))(scale)
    with pytest.raises(TypeError, match="missing a required argument: 'n'"):
        app.periodic("@every:1000", name="ticks.scale")(scale)
    with pytest.raises(TypeError, match="unexpected keyword argument 'm'"):
        app.periodic("@every:1000", name="ticks.scale", kwargs={"n": 1, "m": 1})(scale)
    with pytest.raises(EncodeError):
        app.periodic("@every:1000", name="ticks.scale", args=(object(),))(scale)
    assert app.tasks == {}
    assert app.sync_schedules(store)["upserted"] == [] and store.list_schedules() == []
    app.periodic("@every:1000", name="ticks.scale", args=(3,))(scale)
    assert app.sync_schedules(store)["upserted"] == ["ticks.scale"]
    assert [s.id for s in store.list_schedules()] == ["ticks.scale"]


def test_testing_runs_tasks_through_admission(store: Store) -> None:
    app = make_app(store)
    send = next(iter(app.tasks.values()))
    throttled = send.options(rate_class="smtp")
    with app.testing() as t:
        assert t.store is not store and app.store is t.store
        t.store.upsert_rate_class("smtp", limit=10, window_ms=1_000, paused=True)
        held = throttled.enqueue("a@example.com", subject="held")
        done = send.enqueue("b@example.org", subject="free")
        t.run_all()
        assert done.result(timeout=5) == "sent free to b@example.org"
        assert [j.id for j in t.jobs(state="available")] == [held.id]
        assert t.store.explain_admission(held.id).blocked_by == "rate_class"
        t.store.upsert_rate_class("smtp", limit=10, window_ms=1_000, paused=False)
        t.run_all()
        assert held.result(timeout=5) == "sent held to a@example.com"
        assert {j.id for j in t.jobs(state="completed")} == {held.id, done.id}
    assert app.store is store and sum(store.counts().values()) == 0


def test_finished_jobs_are_announced_on_postgres(store: Store, backend: str) -> None:
    app = make_app(store)
    send = next(iter(app.tasks.values()))
    ref = send.enqueue("a@example.com")
    heard = threading.Event()
    unwatch = store.watch_finished(ref.id, heard.set)
    if backend == "sqlite":
        assert unwatch is None  # no signal: JobRef polls
        return
    assert unwatch is not None
    heard.clear()  # the listener's start calls every watcher once
    [claim] = store.admit("w", ["mail"], 1)
    store.ack(claim, headgate.Outcome.SUCCESS, result=b'"x"')
    assert heard.wait(10)
    unwatch()


def test_app_without_a_url_opens_the_store_the_environment_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HG_STORE", "sqlite")
    monkeypatch.setenv("HG_SQLITE", str(tmp_path / "env.db"))
    app = headgate.App()

    @app.task
    def noop() -> None: ...

    assert not (tmp_path / "env.db").exists()  # opened on first use, not at App()
    noop.enqueue()
    assert (tmp_path / "env.db").exists()
    app.close()
    with pytest.raises(InvalidInput, match="not both"):
        headgate.App("sqlite:///x.db", store=object())  # type: ignore[arg-type]


def test_a_result_timeout_says_the_job_still_waits_for_a_worker(store: Store) -> None:
    app = headgate.App(store=store)

    @app.task(name="never.run")
    def never_run() -> None: ...

    ref = never_run.enqueue()
    with pytest.raises(TimeoutError, match="still available: is a worker running"):
        ref.result(timeout=0.3)
    ref = never_run.options(delay_ms=60_000).enqueue()
    with pytest.raises(TimeoutError, match=r"\(it is scheduled\)"):
        ref.result(timeout=0.3)
