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
# Link targets a bounded stateful run may miss with a 2xx, and why (the hour-long run
# of bench/fuzz_api.py reaches them).
STATEFUL_BEST_EFFORT = {
    # Only a job the worker ran has these, and generated jobs are mostly not due at once
    # (a scheduled time, `pending`) or kept for no time (retention 0).
    "GET /jobs/{job_id}/result": "needs a run job",
    "GET /jobs/{job_id}/output": "needs a run job",
    "GET /jobs/{job_id}/progress": "needs a run job",
    # Needs a generated job that is pending (promote) or scheduled (reschedule).
    "POST /jobs/{job_id}/promote": "needs a pending job",
    "POST /jobs/{job_id}/reschedule": "needs a pending or scheduled job",
    # One quarantined fingerprint is seeded; it can be released once.
    "DELETE /quarantine/{fingerprint}": "one release",
}

# Answer 2xx only for the one seeded job a worker ran (or one the run's worker ran),
# which a bounded run draws only now and then.
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
    # Every operation answered 2xx in some phase; every one a link leads to, in the
    # stateful phase, through the links.
    assert api_fuzz.labels() - report.any_2xx - RUN_ONLY == set()
    missing = api_fuzz.link_targets() - report.stateful_2xx - set(STATEFUL_BEST_EFFORT)
    assert missing == set(), sorted(missing)
    assert api.get("/readyz").status_code == 200
