"""Background duties a worker process can carry (SPEC §6): reclaimer and promoter.

Each runs under a singleton duty lease in the store, so any number of workers and
servers on one database run it once, and a holder that dies is replaced after the TTL.
The runner is the shared APScheduler-based ``headgate.duties.DutyRunner`` (the one
``headgate serve`` uses), limited here to the two duties that keep workers fed:

- **reclaimer** — expired leases → ``lease_lost`` (crash accounting, quarantine), so a
  job whose worker was killed runs again elsewhere;
- **promoter** — due scheduled/retryable jobs → available (admit also promotes, but
  only for the queues being admitted, and only when a worker polls).

The worker talks to it only through ``WorkerDuties`` (start, stop, resign), so a
different runner can be passed to ``Worker(duty_runner=...)``.
"""

from __future__ import annotations

from typing import Protocol

from headgate.duties import DEFAULT_RESIGN_COOLDOWN_MS, DutyRunner
from headgate.store.port import Store

WORKER_DUTIES = ("reclaimer", "promoter")
DEFAULT_INTERVAL_MS = 1_000


class WorkerDuties(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def resign(self, cooldown_ms: int = DEFAULT_RESIGN_COOLDOWN_MS) -> None: ...


def worker_duty_runner(store: Store, holder: str, interval_ms: int = DEFAULT_INTERVAL_MS
                       ) -> DutyRunner:
    """Reclaimer and promoter every ``interval_ms``, held as ``holder`` (the worker id,
    so the dashboard shows which worker runs them)."""
    seconds = interval_ms / 1000
    return DutyRunner(store, holder=holder, duties=WORKER_DUTIES,
                      intervals=dict.fromkeys(WORKER_DUTIES, seconds), threads=2)


__all__ = ["DEFAULT_RESIGN_COOLDOWN_MS", "WORKER_DUTIES", "WorkerDuties", "worker_duty_runner"]
