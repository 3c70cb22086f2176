"""Fuzz the live API from its own OpenAPI document (schemathesis + hypothesis).

Every operation gets generated requests — valid by the schema (positive) and invalid
ones (negative) — against a real server on a real SQLite file. Each response must not
be a 5xx, must have a documented status code and content type, and must match the
documented schema. The budget is bounded (examples per operation, and a wall-clock cap)
so the whole run stays well under a minute. /events is left out: it is an endless
stream, covered by its own tests.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from headgate.api.openapi import document

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

EXAMPLES = {"positive": 30, "negative": 15}
BUDGET_S = 45.0
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_fuzz_against_openapi(api: Api, mode: str, store_url: str) -> None:
    if not store_url.startswith("sqlite"):
        pytest.skip("one backend is enough for the fuzz budget")
    schema = schemathesis.openapi.from_dict(document())
    generation = (schemathesis.GenerationMode.POSITIVE if mode == "positive"
                  else schemathesis.GenerationMode.NEGATIVE)
    session = requests.Session()
    deadline = time.monotonic() + BUDGET_S / 2
    # Something to find: a job, a queue, a schedule.
    job_id = api.enqueue(queue="fuzz")
    api.put("/periodic/fuzz", json={"kind": "tick", "spec": "@every:60000"})
    tried = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path == "/events":
            continue
        if time.monotonic() > deadline:
            break
        fixed = {name: job_id for name in ("job_id",)
                 if any(p.name == name for p in operation.path_parameters)}
        strategy = operation.as_strategy(generation_mode=generation,
                                         path_parameters=fixed or None)

        @settings(max_examples=EXAMPLES[mode], deadline=None, database=None,
                  derandomize=True, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def run(case: schemathesis.Case) -> None:
            response = case.call(base_url=api.url, session=session, timeout=20)
            case.validate_response(response, checks=CHECKS)

        try:
            run()
        except Unsatisfiable:
            continue  # nothing to negate (no parameters, no body)
        tried += 1
    assert tried >= 10
    # And the server is still healthy afterwards.
    assert api.get("/readyz").status_code == 200
