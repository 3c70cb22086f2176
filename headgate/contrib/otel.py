"""OpenTelemetry traces for headgate (``pip install 'headgate-queue[otel]'``: the API only;
the application configures an SDK and exporter as it does for everything else).

::

    from headgate.contrib import otel
    otel.instrument(app)          # an App: its enqueues and every worker running its tasks
    otel.instrument(worker)       # a Worker / a Client / an HttpClient: that one

Producer side: each enqueue is a ``PRODUCER`` span ``enqueue <queue>``
(``messaging.operation.type`` ``send``), current while the job is written, and the W3C
``traceparent``/``tracestate`` of its context go into the job's headers (the envelope's
opaque string map). A batch is one ``send`` span (``messaging.batch.message_count``)
with a ``create`` span per job, each job carrying its own context.
``messaging.message.id`` is the job id once the store has given it.

Worker side: each attempt is a ``CONSUMER`` span ``process <queue>`` whose parent is the
context in the job's headers (so one trace runs from the enqueue through every attempt),
current while the handler runs, with ``messaging.operation.type`` ``process``,
``messaging.client.id`` (the worker id), ``headgate.job.kind``, ``headgate.job.attempt``
(1 on the first run) and ``headgate.job.outcome`` (success, retry, skip, snooze, ...;
``archived`` when the attempt failed with no attempts left, not ``retry``).
An attempt that did not succeed sets the span status to ERROR with the error text and
records the exception (the task's own, behind the task layer's retry decision).

Attribute names follow the messaging semantic conventions as of
opentelemetry-semantic-conventions 0.66 (``messaging.operation.type`` /
``messaging.operation.name``; the older ``messaging.operation`` is not written).

Without ``opentelemetry-api`` installed, ``instrument`` logs that tracing is off and
returns False: nothing else changes. With the API but no SDK configured, spans are the
API's no-ops and no headers are written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from headgate.core import Envelope, Job, Outcome
from headgate.services.client import Client, EnqueueContext, Next
from headgate.services.http_client import HttpClient
from headgate.tasks import App
from headgate.worker import Worker
from headgate.worker.execution import Decision
from headgate.worker.observe import outcome_label

log = logging.getLogger("headgate.otel")

SYSTEM = "headgate"
TRACER_NAME = "headgate"
TRACE_HEADERS = ("traceparent", "tracestate")

# messaging semantic conventions (opentelemetry-semantic-conventions 0.66)
SYSTEM_ATTR = "messaging.system"
DESTINATION = "messaging.destination.name"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
MESSAGE_ID = "messaging.message.id"
BATCH_COUNT = "messaging.batch.message_count"
CLIENT_ID = "messaging.client.id"
# headgate's own
KIND = "headgate.job.kind"
ATTEMPT = "headgate.job.attempt"
OUTCOME = "headgate.job.outcome"
PRIORITY = "headgate.job.priority"


def _api() -> tuple[Any, Any] | None:
    """(opentelemetry.trace, opentelemetry.propagate), or None when not installed."""
    try:
        trace = importlib.import_module("opentelemetry.trace")
        propagate = importlib.import_module("opentelemetry.propagate")
    except ImportError:
        return None
    return trace, propagate


class Tracing:
    """The tracer and propagator behind one ``instrument`` call."""

    def __init__(self, trace: Any, propagate: Any, tracer_provider: Any = None) -> None:
        from headgate import __version__

        self.trace = trace
        self.propagate = propagate
        self.tracer = trace.get_tracer(TRACER_NAME, __version__,
                                       tracer_provider=tracer_provider)

    # -- producer ---------------------------------------------------------------------
    def _carrier(self, env: Envelope, context: Any = None) -> Envelope:
        """``env`` with the trace context (default: the current one) in its headers."""
        carrier: dict[str, str] = {}
        self.propagate.inject(carrier, context=context)
        headers = {k: v for k, v in env.headers.items() if k not in TRACE_HEADERS}
        headers.update({k: v for k, v in carrier.items() if k in TRACE_HEADERS})
        return dataclasses.replace(env, headers=headers)

    def _producer_attrs(self, env: Envelope, operation: str) -> dict[str, Any]:
        attrs: dict[str, Any] = {SYSTEM_ATTR: SYSTEM, DESTINATION: env.queue,
                                 OPERATION_TYPE: operation, OPERATION_NAME: operation,
                                 KIND: env.kind, PRIORITY: env.priority}
        if env.id:
            attrs[MESSAGE_ID] = env.id
        return attrs

    def producer(self, context: EnqueueContext, envs: list[Envelope], call_next: Next
                 ) -> list[str]:
        """Client middleware: the producer span(s) and the headers."""
        kind = self.trace.SpanKind.PRODUCER
        if len(envs) == 1:
            env = envs[0]
            with self.tracer.start_as_current_span(
                    f"enqueue {env.queue}", kind=kind,
                    attributes=self._producer_attrs(env, "send")) as span:
                ids = call_next([self._carrier(env)])
                span.set_attribute(MESSAGE_ID, ids[0])
                return ids
        queues = sorted({e.queue for e in envs})
        name = f"enqueue {queues[0]}" if len(queues) == 1 else "enqueue"
        attrs = {SYSTEM_ATTR: SYSTEM, OPERATION_TYPE: "send", OPERATION_NAME: "send",
                 BATCH_COUNT: len(envs)}
        if len(queues) == 1:
            attrs[DESTINATION] = queues[0]
        with self.tracer.start_as_current_span(name, kind=kind, attributes=attrs):
            # One create span per job, none of them current: each job carries its own.
            spans = [self.tracer.start_span(f"create {e.queue}", kind=kind,
                                            attributes=self._producer_attrs(e, "create"))
                     for e in envs]
            try:
                carried = [self._carrier(e, self.trace.set_span_in_context(span))
                           for e, span in zip(envs, spans, strict=True)]
                ids = call_next(carried)
                for span, job_id in zip(spans, ids, strict=True):
                    span.set_attribute(MESSAGE_ID, job_id)
                return ids
            finally:
                for span in spans:
                    span.end()

    # -- consumer ---------------------------------------------------------------------
    @contextlib.contextmanager
    def consumer(self, job: Job, worker_id: str) -> Iterator[Callable[[Decision], None]]:
        """Worker attempt hook: the consumer span around one attempt."""
        parent = self.propagate.extract(
            {k: v for k, v in (job.headers or {}).items() if k in TRACE_HEADERS})
        attrs = {SYSTEM_ATTR: SYSTEM, DESTINATION: job.queue, OPERATION_TYPE: "process",
                 OPERATION_NAME: "process", MESSAGE_ID: job.id, CLIENT_ID: worker_id,
                 KIND: job.kind, ATTEMPT: job.attempt + 1, PRIORITY: job.priority}
        with self.tracer.start_as_current_span(
                f"process {job.queue}", context=parent, kind=self.trace.SpanKind.CONSUMER,
                attributes=attrs, record_exception=False, set_status_on_exception=False,
                ) as span:

            def finish(decision: Decision) -> None:
                label = outcome_label(decision, job)
                span.set_attribute(OUTCOME, label)
                if decision.outcome is Outcome.SUCCESS:
                    return
                if decision.exc is not None:
                    span.record_exception(decision.exc)
                if decision.outcome not in (Outcome.SNOOZE, Outcome.THROTTLED):
                    first = (decision.error or label).splitlines()[0]
                    span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, first))

            yield finish


def instrument(target: App | Worker | Client | HttpClient, *,
               tracer_provider: Any = None) -> bool:
    """Trace ``target``'s enqueues and/or attempts (see the module). ``tracer_provider``:
    the SDK provider to use (default: the global one). False when opentelemetry-api is
    not installed (then nothing changes)."""
    api = _api()
    if api is None:
        log.info("opentelemetry-api is not installed: headgate tracing is off "
                 "(pip install 'headgate-queue[otel]')")
        return False
    tracing = Tracing(*api, tracer_provider=tracer_provider)
    if isinstance(target, App):
        target.producer_middleware.append(tracing.producer)
        target.attempt_hooks.append(tracing.consumer)
    elif isinstance(target, Worker):
        target.add_attempt_hook(tracing.consumer)
    elif isinstance(target, Client | HttpClient):
        target.middleware.append(tracing.producer)
    else:
        raise TypeError(f"instrument() takes an App, Worker, Client or HttpClient, not "
                        f"{type(target).__name__}")
    return True


__all__: Sequence[str] = ["Tracing", "instrument"]
