"""Contract and operations residue (issue 24), over real HTTP on both backends: zero
values read as the seed reads them, bad path bytes and odd paths answered in JSON,
junk cursors refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures


# -- zero values -----------------------------------------------------------------------

def test_zero_max_attempts_and_empty_queue_take_the_defaults_on_enqueue(api: Api) -> None:
    """A serializer that writes every field (no omitempty) sends 0 and "" for unset."""
    job_id = api.enqueue(queue="", max_attempts=0, priority=0, partition_key="")
    job = api.get(f"/jobs/{job_id}").json()
    assert (job["queue"], job["max_attempts"]) == ("default", 25)
    # Other fields keep their checks.
    r = api.post("/jobs", json={"kind": "k", "payload": "", "weight": 0})
    assert (r.status_code, r.json()) == (400, {"error": "weight must be >= 1"})
    assert api.get("/jobs/counts").json()["counts"]["available"] == 1


def test_zero_max_attempts_and_empty_queue_take_the_defaults_on_a_schedule(api: Api) -> None:
    r = api.put("/periodic/nightly", json={"kind": "tick", "spec": "@every:60000",
                                           "queue": "", "max_attempts": 0})
    assert r.status_code == 200, r.text
    [s] = api.get("/periodic").json()
    assert (s["queue"], s["max_attempts"]) == ("default", 25)
    r = api.post("/periodic/nightly/run")
    assert r.status_code == 202, r.text
    job = api.get(f"/jobs/{r.json()['id']}").json()
    assert (job["queue"], job["max_attempts"]) == ("default", 25)
