"""The worker runtime: ``Worker``, handler outcomes, the job context.

::

    from headgate import JsonDecoder, Retry, Skip, Worker

    def make_worker(store):                      # headgate worker --app shop:make_worker
        worker = Worker(store, queues=["email"], concurrency=8)

        @worker.handler("email.send", decoder=JsonDecoder(), timeout_ms=30_000)
        def send(job, ctx):
            message = ctx.payload                 # decoded; job.payload is the raw bytes
            if message["to"].endswith(".invalid"):
                return Skip("no such domain")     # archived, never retried
            ctx.progress(1, 2, "connecting")
            ctx.logger.info("sending to %s", message["to"])   # kept in the attempt history
            if ctx.cancelled.wait(0.1):           # timeout, operator cancel, shutdown...
                return None                       # (the outcome is then the runtime's)
            raise Retry(delay_ms=5_000)           # or return it; any other exception retries

        return worker

Handlers are called as ``handler(job, ctx)``: ``job`` is the claimed ``headgate.Job``
(counters included: ``attempt``, ``crash_attempt``, ``fence``), ``ctx`` a ``JobContext``.
Returning ``None`` (or any non-outcome) is success; returning ``bytes`` records them as
the result, like ``ctx.set_result``. Outcomes: ``Retry``, ``Skip``, ``Revoke``,
``Snooze``, ``RateLimited``, ``Throttled``, ``Undecodable`` — raised or returned. A
handler may be an ``async def``: it is awaited to the end on the worker's event loop
(``aio``), holding a slot meanwhile, and cancelled by timeouts, deadlines, operator
cancel and shutdown.

``worker.config`` is the worker's ``WorkerConfig`` (every setting, frozen; ``configure``
replaces it); ``HandlerSpec`` (``handlers``) is one registration.

Decisions the runtime makes (docs/ARCHITECTURE.md, Workers) are documented on ``Worker``
and in the module that makes them: ``engine`` (threads, shutdown), ``attempts`` (how an
attempt ends), ``acks``, ``leases``, ``heartbeat`` (signals), ``control`` (statuses),
``isolation`` and ``launcher`` (CLI, signals, exit codes).
"""

from .decoders import JsonDecoder
from .job_context import JobContext
from .outcomes import (
    JobOutcome,
    RateLimited,
    Retry,
    Revoke,
    Skip,
    Snooze,
    Throttled,
    Undecodable,
)
from .runtime import (
    DEADLINE_HEADER,
    EXIT_FORCED,
    EXIT_OK,
    EXIT_RESTART,
    HandlerSpec,
    Worker,
    WorkerConfig,
)

__all__ = [
    "DEADLINE_HEADER", "EXIT_FORCED", "EXIT_OK", "EXIT_RESTART", "HandlerSpec", "JobContext",
    "JobOutcome", "JsonDecoder", "RateLimited", "Retry", "Revoke", "Skip", "Snooze",
    "Throttled", "Undecodable", "Worker", "WorkerConfig",
]
