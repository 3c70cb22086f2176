"""Producers without database access: `headgate.App("http://…",
token=…)` and `headgate.HttpClient` against a real `headgate serve` (with a worker in
its process), on both backends."""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from integration_support import free_port, serve
from support import TcpRelay

import headgate
from headgate.tasks import JobFailed

TOKEN = "integration-token-0123456789"


@pytest.fixture
def server(store_url: str, tmp_path: Path) -> Iterator[str]:
    with serve(store_url, tmp_path, workers=2, env={"HG_API_TOKENS": TOKEN}) as url:
        yield url


@pytest.fixture
def closing(server: str) -> Iterator[Callable[[headgate.HttpClient], headgate.HttpClient]]:
    """Hands a test's HTTP clients back and closes them after the test, before `server`
    stops: serve's graceful stop otherwise waits out each idle keep-alive connection
    (gunicorn's keepalive, 2 s), a wait no test here is about."""
    clients: list[headgate.HttpClient] = []

    def keep(client: headgate.HttpClient) -> headgate.HttpClient:
        clients.append(client)
        return client

    yield keep
    for client in clients:
        client.close()


@pytest.fixture
def load_app(monkeypatch: pytest.MonkeyPatch, closing: Callable[..., headgate.HttpClient]
             ) -> Callable[[str, str | None], ModuleType]:
    """integrations_app imported afresh, its App pointing at a URL, its HTTP client
    closed after the test (`closing`)."""

    def load(url: str, token: str | None) -> ModuleType:
        monkeypatch.setenv("HG_INTEGRATION_URL", url)
        if token is None:
            monkeypatch.delenv("HG_INTEGRATION_TOKEN", raising=False)
        else:
            monkeypatch.setenv("HG_INTEGRATION_TOKEN", token)
        monkeypatch.delitem(sys.modules, "integrations_app", raising=False)
        mod = importlib.import_module("integrations_app")
        closing(mod.app.client)
        return mod

    return load


def test_http_app_enqueues_reads_and_waits_for_results(
        server: str, load_app: Callable[[str, str | None], ModuleType]) -> None:
    mod = load_app(server, TOKEN)
    assert mod.app.client.__class__ is headgate.HttpClient  # no store was opened
    ref = mod.add.enqueue(2, 3)
    assert ref.result(timeout=30) == 5
    assert ref.state() is headgate.State.COMPLETED
    job = mod.app.client.get_job(ref.id)
    assert (job.kind, job.queue) == ("integrations_app.add", "integration")
    with pytest.raises(JobFailed) as failed:
        mod.explode.enqueue("boom over http").result(timeout=30)
    assert failed.value.state == "archived"
    assert "boom over http" in (failed.value.error or "")
    # Each call has its own Idempotency-Key: two identical calls are two jobs.
    a, b = mod.add.enqueue(1, 1), mod.add.enqueue(1, 1)
    assert a.id != b.id


def test_http_app_async_producer(
        server: str, load_app: Callable[[str, str | None], ModuleType]) -> None:
    mod = load_app(server, TOKEN)

    async def produce() -> int:
        ref = await mod.add.enqueue_async(20, 22)
        return await ref.result_async(timeout=30)

    assert asyncio.run(produce()) == 42


def test_testing_an_http_app_stays_in_the_test_process(
        server: str, store_url: str, load_app: Callable[[str, str | None], ModuleType]
) -> None:
    """app.testing() on an http(s):// app runs on its throw-away store: no job reaches
    the real server (they did: enqueue went over HTTP and t.jobs() was empty)."""
    mod = load_app(server, TOKEN)
    with mod.app.testing() as t:
        ref = mod.add.enqueue(2, 3)
        later = asyncio.run(mod.add.enqueue_async(4, 5))
        t.run_all()
        assert {j.id for j in t.jobs()} == {ref.id, later.id}
        assert (ref.result(timeout=5), later.result(timeout=5)) == (5, 9)
    assert mod.app.client.__class__ is headgate.HttpClient
    real = headgate.open_store(store_url)
    try:
        assert [real.get_job(job_id) for job_id in (ref.id, later.id)] == [None, None]
    finally:
        real.close()
    assert mod.add.enqueue(1, 1).result(timeout=30) == 2  # the server again


def test_http_client_raw_enqueue_and_wait(
        server: str, closing: Callable[[headgate.HttpClient], headgate.HttpClient]) -> None:
    client = closing(headgate.HttpClient(server, token=TOKEN))
    job_id = client.enqueue("integrations_app.add", b'{"args":[4,5],"kwargs":{}}',
                            queue="integration", headers={"traceparent": "x"})
    job = client.wait(job_id, timeout=30)
    assert job.state is headgate.State.COMPLETED
    assert job.headers["traceparent"] == "x"
    assert client.get_result(job_id).bytes == b"9"
    assert client.get_job("no-such-job") is None


def test_wrong_or_missing_token_is_unauthorized(
        server: str, load_app: Callable[[str, str | None], ModuleType],
        closing: Callable[[headgate.HttpClient], headgate.HttpClient]) -> None:
    mod = load_app(server, "not-the-token")
    with pytest.raises(headgate.Unauthorized, match="invalid bearer token"):
        mod.add.enqueue(1, 2)
    with pytest.raises(headgate.Unauthorized, match="missing bearer token"):
        closing(headgate.HttpClient(server)).get_job("x")


def test_api_errors_become_typed_errors(
        server: str, closing: Callable[[headgate.HttpClient], headgate.HttpClient]) -> None:
    client = closing(headgate.HttpClient(server, token=TOKEN))
    first = client.enqueue("k", queue="parked", unique_key=b"only-one")
    with pytest.raises(headgate.Duplicate) as dup:
        client.enqueue("k", queue="parked", unique_key=b"only-one")
    assert dup.value.existing_id == first
    client.enqueue("k", queue="parked", id="fixed-id")
    with pytest.raises(headgate.IdConflict):
        client.enqueue("k", b"other payload", queue="parked", id="fixed-id")
    with pytest.raises(headgate.NotFound):
        client.request("POST", "/jobs/no-such-job/cancel")
    with pytest.raises(headgate.InvalidInput):
        client.request("POST", "/jobs", {"kind": "k", "payload": "not base64!"})


def test_a_server_that_is_down_is_store_unavailable_after_retries() -> None:
    client = headgate.HttpClient(f"http://127.0.0.1:{free_port()}", attempts=3)
    with pytest.raises(headgate.StoreUnavailable, match="server unreachable"):
        client.enqueue("k")


def test_503_is_retried_with_the_same_idempotency_key(
        store_url: str, tmp_path: Path) -> None:
    """SQLite's write lock held by another connection: the server answers 503 with
    Retry-After until it is released; the client's retry then enqueues one job."""
    if not store_url.startswith("sqlite"):
        pytest.skip("holding the write lock is a SQLite set-up")
    with serve(store_url, tmp_path, env={"HG_API_TOKENS": TOKEN}) as url:
        client = headgate.HttpClient(url, token=TOKEN, attempts=30)
        lock = sqlite3.connect(store_url.removeprefix("sqlite:///"), isolation_level=None,
                               check_same_thread=False)
        lock.execute("BEGIN EXCLUSIVE")
        released = threading.Timer(3.0, lambda: lock.execute("COMMIT"))
        released.start()
        try:
            job_id = client.enqueue("k", queue="parked")
        finally:
            released.join()
            lock.close()
            client.close()  # or serve's stop waits out its idle keep-alive connection
        store = headgate.open_store(store_url)
        try:
            assert [j.id for j in store.list_jobs(headgate.JobFilter(queue="parked")).jobs
                    ] == [job_id]
        finally:
            store.close()


class DropFirstAnswer(TcpRelay):
    """A relay in front of the server that carries the first request and closes the
    client's connection instead of passing the answer back: the client sees a lost
    answer for a request the server did carry out."""

    def on_answer(self, n: int) -> str:
        return self.CUT if n == 0 else self.FORWARD


def test_a_retry_after_a_lost_answer_joins_the_first_job(
        server: str, store_url: str) -> None:
    relay = DropFirstAnswer(("127.0.0.1", int(server.rsplit(":", 1)[1])))
    try:
        client = headgate.HttpClient(f"http://127.0.0.1:{relay.port}", token=TOKEN)
        job_id = client.enqueue("k", queue="parked-relay")
    finally:
        relay.close()
    assert relay.accepted >= 2
    store = headgate.open_store(store_url)
    try:
        jobs = store.list_jobs(headgate.JobFilter(queue="parked-relay")).jobs
    finally:
        store.close()
    assert [j.id for j in jobs] == [job_id]
