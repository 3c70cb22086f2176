"""OpenTelemetry traces with the real SDK's in-memory exporter: one
trace from the enqueue through every attempt, on a real Worker (in-process threads, so
the exporter in this process sees both sides), both backends; and the no-op cases."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import headgate
from headgate.contrib import otel
from headgate.tasks import JobFailed

QUEUE = "traced"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
def app(store_url: str, provider: TracerProvider) -> Iterator[headgate.App]:
    app = headgate.App(store_url)

    @app.task(queue=QUEUE, name="traced.add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(queue=QUEUE, name="traced.flaky", max_attempts=2,
              retry=headgate.Backoff(base_ms=10, max_ms=10, jitter=0))
    def flaky() -> None:
        raise ValueError("flaky failure")

    assert otel.instrument(app, tracer_provider=provider) is True
    worker = app.worker(queues=[QUEUE], concurrency=2, poll_floor_ms=1, poll_ceiling_ms=20,
                        heartbeat_ms=200, drain_ms=1000)
    worker.start()
    try:
        yield app
    finally:
        worker.stop(timeout=30)
        app.close()


def spans_of(exporter: InMemorySpanExporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_one_trace_from_enqueue_through_the_run(
        app: headgate.App, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    add = app.tasks["traced.add"]
    with provider.get_tracer("test").start_as_current_span("request") as request:
        ref = add.enqueue(2, 3)
    assert ref.result(timeout=30) == 5
    (producer,) = spans_of(exporter, f"enqueue {QUEUE}")
    consumer = _wait_span(exporter, f"process {QUEUE}")
    trace_id = request.get_span_context().trace_id
    assert producer.context.trace_id == consumer.context.trace_id == trace_id
    assert producer.parent.span_id == request.get_span_context().span_id
    assert consumer.parent.span_id == producer.context.span_id
    assert (producer.kind, consumer.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert dict(producer.attributes).items() >= {
        "messaging.system": "headgate", "messaging.destination.name": QUEUE,
        "messaging.operation.type": "send", "messaging.message.id": ref.id,
        "headgate.job.kind": "traced.add"}.items()
    assert dict(consumer.attributes).items() >= {
        "messaging.system": "headgate", "messaging.destination.name": QUEUE,
        "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.message.id": ref.id, "headgate.job.attempt": 1,
        "headgate.job.outcome": "success"}.items()
    assert consumer.status.status_code is StatusCode.UNSET
    # The context travelled in the job's headers.
    traceparent = app.store.get_job(ref.id).headers["traceparent"]
    assert traceparent.split("-")[1:3] == [f"{trace_id:032x}",
                                           f"{producer.context.span_id:016x}"]


def test_each_failed_attempt_is_an_error_span_under_the_same_producer(
        app: headgate.App, exporter: InMemorySpanExporter) -> None:
    ref = app.tasks["traced.flaky"].enqueue()
    with pytest.raises(JobFailed):
        ref.result(timeout=30)
    (producer,) = spans_of(exporter, f"enqueue {QUEUE}")
    attempts = _wait_span(exporter, f"process {QUEUE}", count=2)
    assert sorted(s.attributes["headgate.job.attempt"] for s in attempts) == [1, 2]
    for span in attempts:
        assert span.parent.span_id == producer.context.span_id
        assert span.context.trace_id == producer.context.trace_id
        assert span.status.status_code is StatusCode.ERROR
        assert "flaky failure" in span.status.description
        (event,) = [e for e in span.events if e.name == "exception"]
        assert event.attributes["exception.type"] == "ValueError"
    # The last attempt failed with none left: the job is archived, and its span says so.
    outcomes = {s.attributes["headgate.job.attempt"]: s.attributes["headgate.job.outcome"]
                for s in attempts}
    assert outcomes == {1: "retry", 2: "archived"}
    assert app.store.get_job(ref.id).state is headgate.State.ARCHIVED


def test_a_batch_carries_one_context_per_job_and_asyncio_enqueues_are_traced(
        app: headgate.App, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    add = app.tasks["traced.add"]
    refs = app.enqueue_many([add.call(1, 1), add.call(2, 2)])
    assert [r.result(timeout=30) for r in refs] == [2, 4]
    (batch,) = spans_of(exporter, f"enqueue {QUEUE}")
    assert batch.attributes["messaging.batch.message_count"] == 2
    creates = spans_of(exporter, f"create {QUEUE}")
    assert sorted(s.attributes["messaging.message.id"] for s in creates) == sorted(
        r.id for r in refs)
    assert all(s.parent.span_id == batch.context.span_id for s in creates)
    parents = {app.store.get_job(r.id).headers["traceparent"].split("-")[2] for r in refs}
    assert parents == {f"{s.context.span_id:016x}" for s in creates}
    exporter.clear()

    async def produce() -> int:
        with provider.get_tracer("test").start_as_current_span("async request"):
            ref = await add.enqueue_async(5, 5)
        return await ref.result_async(timeout=30)

    assert asyncio.run(produce()) == 10
    (request,) = spans_of(exporter, "async request")
    (producer,) = spans_of(exporter, f"enqueue {QUEUE}")
    assert producer.parent.span_id == request.context.span_id


def _wait_span(exporter: InMemorySpanExporter, name: str, count: int = 1):
    from support import wait_for

    spans = wait_for(lambda: len(spans_of(exporter, name)) >= count and spans_of(
        exporter, name), 10, f"{count} span(s) {name}")
    return spans[0] if count == 1 else spans


NO_OP = """
import sys
{block}
import headgate
from headgate.contrib import otel

app = headgate.App()

@app.task(name="noop.add")
def add(a, b):
    return a + b

print("instrumented", otel.instrument(app))
with app.testing() as t:
    ref = add.enqueue(1, 2)
    t.run_all()
    job = t.store.get_job(ref.id)
    print("state", job.state.value, "traceparent" in job.headers, ref.result(timeout=5))
"""


@pytest.mark.parametrize("case", ["api-without-sdk", "not-installed"])
def test_without_an_sdk_or_without_opentelemetry_nothing_changes(
        tmp_path: Path, case: str) -> None:
    block = "sys.modules['opentelemetry'] = None" if case == "not-installed" else ""
    script = tmp_path / "noop.py"
    script.write_text(textwrap.dedent(NO_OP.format(block=block)))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    instrumented = "False" if case == "not-installed" else "True"
    assert out.stdout.split("\n")[:2] == [f"instrumented {instrumented}",
                                          "state completed False 3"]

