"""Schemathesis's own engine, every phase, against the live API on both backends: no
server error, no response outside the document, the routes of a created thing reached
through the document's links, and nothing changed by a sample of refused mutations.
The driver is tests/api_fuzz.py; bench/fuzz_api.py runs the same for an hour against
`headgate serve`.

The budget is bounded by example and step counts (no wall-clock assertions): well
under a minute per backend on this machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import api_fuzz

from headgate.adapters.sqlite import SqliteStore

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

MAX_EXAMPLES = 6
STATEFUL_EXAMPLES = 60
MAX_STEPS = 30
SEED = 43
# The routes the links exist for (a new job's, a new schedule's, a bulk operation's):
# the document must link to each. The hour-long run (bench/fuzz_api.py) reaches them
# all with a 2xx:
# a job's result, output and progress need a job the worker ran, promote and
# reschedule a generated job that is pending or scheduled, retry one cancelled first
# (a chain of three), and only one quarantined
# fingerprint is seeded.
STATEFUL_2XX = {
    "GET /jobs/{job_id}", "DELETE /jobs/{job_id}", "POST /jobs/{job_id}/cancel",
    "PUT /jobs/{job_id}/payload",
    "GET /jobs/{job_id}/admission", "GET /operations/{op_id}",
    "DELETE /periodic/{schedule_id}", "POST /periodic/{schedule_id}/run",
    "GET /periodic/{schedule_id}/enqueue-events",
}

# Answer 2xx only for the one seeded job a worker ran (or one the run's worker ran),
# which a bounded run draws only now and then. The stateful phase reaches them only
# two links from a new job (through GET /jobs or GET /jobs/{job_id}), so a bounded run
# may not pick that path at all: the links to them are checked in the document.
# Reached with a 2xx in every bounded run: a new job read back through its link (its
# cancel or delete may meet a job the worker already finished: a 409 is then right).
CORE_2XX = {"GET /jobs/{job_id}"}
RUN_ONLY = {"GET /jobs/{job_id}/result", "GET /jobs/{job_id}/output",
            "GET /jobs/{job_id}/progress"}


def test_every_phase_every_operation(make_api: Callable[..., Api]) -> None:
    # No operations runner in the server: the driver runs bulk operations itself,
    # between requests, so a refused request's before and after are comparable.
    api = make_api(background=False)
    # The coverage phase's two thousand boundary cases are refused by validation that
    # is the same code on both engines, so the suite runs them on SQLite only (the
    # hour-long bench/fuzz_api.py runs every phase on both).
    on_sqlite = isinstance(api.store, SqliteStore)
    report = api_fuzz.run(api.url, api.store, max_examples=MAX_EXAMPLES,
                          stateful_examples=STATEFUL_EXAMPLES, max_steps=MAX_STEPS,
                          seed_value=SEED, coverage=on_sqlite)
    print(report.summary())
    assert report.errors == []
    assert report.failures == []
    # schemathesis's own verdict agrees: a check that does not apply to an operation is
    # off for it, so no phase counts it as a failure.
    assert "stateful" in report.phases
    assert report.failed_phases() == {}
    assert report.changed_by_refused == []
    assert report.refused_checked > 0
    # The document links to every route that names a created thing. Which of them a
    # bounded run reaches (and with a 2xx) depends on the paths schemathesis draws and
    # on what the worker did meanwhile, so the suite asks for the core of it and a
    # large share of the rest; bench/fuzz_api.py's long run reports full coverage.
    targets = api_fuzz.link_targets()
    assert (STATEFUL_2XX | RUN_ONLY) - targets == set()
    # The core routes are reached through their links every run; whether a drawn step
    # finds its job still there (a 2xx) varies with a loaded machine's timing, so a 2xx
    # from any phase counts.
    assert CORE_2XX - report.stateful_seen == set()
    assert CORE_2XX - (report.stateful_2xx | report.any_2xx) == set()
    reached = len(targets & report.stateful_seen) / len(targets)
    answered = len(api_fuzz.labels() & report.any_2xx) / len(api_fuzz.labels())
    assert reached >= 0.75, sorted(targets - report.stateful_seen)
    assert answered >= 0.8, sorted(api_fuzz.labels() - report.any_2xx)
    assert api.get("/readyz").status_code == 200
