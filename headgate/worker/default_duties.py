"""The maintenance duties a worker process runs, by default (docs/ARCHITECTURE.md, Duties).

A deployment of workers alone must recover crashed jobs and keep the store bounded, so
``Worker.run()`` and ``headgate worker`` carry duties unless told not to
(``duties=False``, ``--no-duties``). Each runs under its singleton duty lease in the
store: any number of workers and servers on one database elect one runner per duty, and
a holder that dies is replaced after the lease's TTL (3 ticks, at least 3 s). The runner
is the shared ``headgate.services.duties.DutyRunner`` (the one ``headgate serve`` uses); APScheduler
is imported only when a worker with duties starts.

What a worker runs by default, and why:

- **reclaimer** — expired leases → ``lease_lost`` (crash accounting, quarantine): without
  it a job whose worker was killed stays ``running`` for good;
- **promoter** — due scheduled/retryable jobs → available, for every queue (admission
  promotes only the queues it admits, and only when a worker polls);
- **scheduler** — periodic schedules (``Store.upsert_schedule`` needs no server), so
  they fire with no server running. Its ticks are enqueued through a plain ``Client``;
  when periodic jobs must pass a producer's middleware or authorizer, pass
  ``worker_duty_runner(..., client=that_client)`` as ``duty_runner``;
- **retention** — terminal jobs past their retention are deleted, so the store stays
  bounded;
- **worker_aging** — registry rows of workers gone silent are forgotten (every process
  start is a new worker id, so they would pile up);
- **history** — per-queue minute buckets from the maintained counters (cheap, no scan),
  so a server started later shows an unbroken history;
- **counters** — on PostgreSQL a new generation of the counter rows every few seconds,
  so that a long-held snapshot elsewhere does not slow every admission (a no-op on
  SQLite).

Not **operations**: bulk operations are started only through the API, and a server run
with ``--no-duties`` runs them itself in the background; a worker taking them over
there would run them beside it.

The fast duties (reclaimer, promoter, scheduler) tick every ``duty_interval_ms``; the
others keep their standard intervals (``headgate.services.duties.DEFAULT_INTERVALS``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from headgate.core import InvalidInput
from headgate.services.duties import DEFAULT_INTERVALS, DEFAULT_RESIGN_COOLDOWN_MS, DutyRunner
from headgate.store.port import Store

if TYPE_CHECKING:
    from headgate.services.client import Client

WORKER_DUTIES = ("reclaimer", "promoter", "scheduler", "retention", "worker_aging", "history",
                 "counters")
FAST_DUTIES = ("reclaimer", "promoter", "scheduler")
DEFAULT_INTERVAL_MS = 1_000
THREADS = 3


class WorkerDuties(Protocol):
    """What the worker needs of a duty runner (``Worker(duty_runner=...)``)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def resign(self, cooldown_ms: int = DEFAULT_RESIGN_COOLDOWN_MS) -> None: ...


def duty_names(duties: bool | Iterable[str]) -> tuple[str, ...]:
    """``True`` → the worker defaults, ``False`` → none, or the names given (any
    standard duty), checked so a typo fails at configuration, not silently."""
    if duties is True:
        return WORKER_DUTIES
    if duties is False:
        return ()
    if isinstance(duties, str):
        duties = [d for d in duties.split(",") if d]
    try:
        names = tuple(dict.fromkeys(duties))
    except TypeError:
        raise InvalidInput("duties must be True, False or a list of duty names") from None
    for name in names:
        if not isinstance(name, str) or name not in DEFAULT_INTERVALS:
            raise InvalidInput(f"unknown duty {name!r}: one of "
                               f"{', '.join(DEFAULT_INTERVALS)}")
    return names


def worker_duty_runner(
    store: Store, holder: str, interval_ms: int = DEFAULT_INTERVAL_MS, *,
    duties: Iterable[str] = WORKER_DUTIES, client: Client | None = None,
) -> DutyRunner:
    """The duties held as ``holder`` (the worker id, so the dashboard shows which worker
    runs them); ``client`` enqueues periodic jobs (default: a plain Client)."""
    names = duty_names(list(duties))
    intervals = {n: interval_ms / 1000 for n in names if n in FAST_DUTIES}
    return DutyRunner(store, holder=holder, client=client, duties=names,
                      intervals=intervals, threads=THREADS)


__all__ = [
    "DEFAULT_RESIGN_COOLDOWN_MS", "WORKER_DUTIES", "WorkerDuties", "duty_names",
    "worker_duty_runner",
]
