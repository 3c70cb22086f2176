"""Schemathesis's own engine, every phase, against the live API on both backends: no
server error, no response outside the document, every operation reached with a 2xx by
the stateful phase (through the document's links), and nothing changed by a sample of
refused mutations. The driver is tests/api_fuzz.py; bench/fuzz_api.py runs the same
for an hour against `headgate serve`.

The budget is bounded by example and step counts (no wall-clock assertions): well
under a minute per backend on this machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import api_fuzz

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

MAX_EXAMPLES = 6
STATEFUL_EXAMPLES = 60
MAX_STEPS = 30
SEED = 43
# The routes the links exist for (a new job's, a new schedule's, a bulk operation's),
# which a bounded stateful run must answer 2xx on; every other link target it must at
# least reach. The hour-long run (bench/fuzz_api.py) reaches the rest with a 2xx too:
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
RUN_ONLY = {"GET /jobs/{job_id}/result", "GET /jobs/{job_id}/output",
            "GET /jobs/{job_id}/progress"}


def test_every_phase_every_operation(make_api: Callable[..., Api]) -> None:
    # No operations runner in the server: the driver runs bulk operations itself,
    # between requests, so a refused request's before and after are comparable.
    api = make_api(background=False)
    report = api_fuzz.run(api.url, api.store, max_examples=MAX_EXAMPLES,
                          stateful_examples=STATEFUL_EXAMPLES, max_steps=MAX_STEPS,
                          seed_value=SEED)
    print(report.summary())
    assert report.errors == []
    assert report.failures == []
    assert report.changed_by_refused == []
    assert report.refused_checked > 0
    # Every operation answered 2xx in some phase; the stateful phase reached every
    # link target through the links (but the run-only ones, which links lead to), and
    # the core ones with a 2xx.
    assert api_fuzz.labels() - report.any_2xx - RUN_ONLY == set()
    assert RUN_ONLY - api_fuzz.link_targets() == set()
    assert api_fuzz.link_targets() - report.stateful_seen - RUN_ONLY == set()
    assert STATEFUL_2XX - report.stateful_2xx == set()
    assert api.get("/readyz").status_code == 200
