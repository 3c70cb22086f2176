"""Fuzz the live API from its own OpenAPI document (schemathesis + hypothesis), on both
backends.

Three runs, each against a real server on a real database:

1. Every operation of /api/v1/openapi.json gets generated requests — valid by the
   schema (positive) and invalid ones (negative). Mutating requests carry a fresh
   Idempotency-Key (a repeated generated key would only test the replay path), and path
   parameters are, half the time, names that exist (jobs in every state, the queue, a
   schedule, a rate class, a concurrency limit, a quarantined fingerprint, an operation,
   a worker), so handlers run past their 404s. Each response must not be a 5xx, must
   have a documented status code, content type and headers, and must match the
   documented schema. The run asserts that every operation was exercised.
2. `/events` (an endless stream) is opened with generated headers and query, checked
   up to its first frame, and closed.
3. A stateful run (a hypothesis state machine over the HTTP API, with a worker acting
   on the store): enqueue → get → list → counts → cancel / retry / promote /
   reschedule / edit payload / bulk actions → delete, with a model of every job's state
   that each response is checked against, and every response validated against the
   document too.

The budget is bounded by example counts (no wall-clock assertions): about 15 s per
backend on this machine.
"""

from __future__ import annotations

import base64
import itertools
import uuid
from typing import TYPE_CHECKING, Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import headgate
from headgate.api.openapi import document
from headgate.core import Outcome
from headgate.core.records import WorkerBeat

if TYPE_CHECKING:
    from api_helpers import Api

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures

EXAMPLES = {"positive": 16, "negative": 8}
STATEFUL_EXAMPLES = 10
STATEFUL_STEPS = 25
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]
MUTATING = {"POST", "PUT", "DELETE"}
SCHEMA = schemathesis.openapi.from_dict(document())
STREAMS = {"/events"}
_keys = itertools.count()
# Values a generator rarely produces but attackers and broken clients do: NUL (which
# PostgreSQL text cannot hold), SQL and LIKE metacharacters, markup, traversal, and sizes.
HOSTILE = ["\x00", "a\x00b", "'; DROP TABLE jobs; --", "%_\\%", "<script>alert(1)</script>",
           "../../etc/passwd", "ü🙂\u200b", " ", "x" * 3000, "-1", "1e309", "null"]


def fresh_key() -> str:
    return f"fuzz-{next(_keys)}-{uuid.uuid4().hex[:8]}"


def operations() -> list[Any]:
    return [result.ok() for result in SCHEMA.get_all_operations()]


# -- resources that exist, for path parameters ------------------------------------------

def seed(api: Api, quarantine: Any = None) -> dict[str, list[str]]:
    """One of everything a path can name, with jobs in every reachable state."""
    s = api.store
    c = headgate.Client(s)
    tag = uuid.uuid4().hex[:6]
    queue = f"fuzz-{tag}"
    ids: list[str] = []
    ids.append(c.enqueue("fuzz.available", b'{"n":1}', queue=queue))
    ids.append(c.enqueue("fuzz.scheduled", b"", queue=queue,
                         scheduled_at_ms=s.now_ms() + 3_600_000))
    ids.append(c.enqueue("fuzz.pending", b"", queue=queue, pending=True))
    work = f"work-{tag}"
    for outcome in (Outcome.SUCCESS, Outcome.SKIP, None):
        job_id = c.enqueue("fuzz.worked", b"x", queue=work, max_attempts=1)
        # An hour's lease: the one left running must not expire mid-run (a lost-lease
        # set-up for the quarantine routes counts the leases it reclaims).
        claim = s.admit(f"w-{tag}", [work], capacity=1, lease_ms=3_600_000)[0]
        if outcome is not None:
            s.ack(claim, outcome, result=b'{"ok":true}' if outcome is Outcome.SUCCESS else None)
        ids.append(job_id)
    cancelled = c.enqueue("fuzz.cancelled", b"", queue=queue)
    s.operator_cancel(cancelled)
    ids.append(cancelled)
    api.put(f"/periodic/fuzz-{tag}", json={"kind": "fuzz.tick", "spec": "@every:60000"})
    s.upsert_rate_class(f"rc-{tag}", 5, 1000)
    s.upsert_concurrency_limit(f"cl-{tag}", queue, 2)
    s.heartbeat(WorkerBeat(f"w-{tag}", host="fuzz", queues=(queue,), concurrency=1))
    op = s.create_operation("retry", {"queue": queue}, dry_run=True)
    fingerprints = ["0" * 64]
    if quarantine is not None:  # three lost leases: only for the routes that name one
        fingerprints = [quarantine(s, f"fuzz.crash.{tag}", b"boom")]
    return {
        "job_id": ids,
        "queue": [queue, work],
        "schedule_id": [f"fuzz-{tag}"],
        "name": [f"rc-{tag}", f"cl-{tag}"],
        "fingerprint": fingerprints,
        "op_id": [op.id],
        "worker_id": [f"w-{tag}"],
        "kind": ["fuzz.worked", "fuzz.pending"],
    }


def call(api: Api, session: requests.Session, case: schemathesis.Case) -> Any:
    if case.method.upper() in MUTATING:
        case.headers = {**(case.headers or {}), "Idempotency-Key": fresh_key()}
    return case.call(base_url=api.url, session=session, timeout=30)


# -- 1. every operation, positive and negative ------------------------------------------

def fuzz_operation(api: Api, session: requests.Session, operation: Any,
                   generation: schemathesis.GenerationMode, mode: str,
                   known: dict[str, list[str]]) -> Any:
    names = [p.name for p in operation.path_parameters]
    texts = [p.name for p in operation.query if p.definition.get("schema", {}).get("type")
             == "string"]

    @settings(max_examples=EXAMPLES[mode], deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=generation), data=st.data())
    def run(case: schemathesis.Case, data: st.DataObject) -> None:
        for name in names:
            pick = data.draw(st.sampled_from(["generated", "existing", "existing",
                                              "hostile"]), label=name)
            if pick != "generated":
                pool = known[name] if pick == "existing" else HOSTILE
                case.path_parameters = {**(case.path_parameters or {}),
                                        name: data.draw(st.sampled_from(pool))}
        for name in texts:
            if data.draw(st.integers(0, 3), label=f"hostile {name}") == 0:
                case.query = {**(case.query or {}), name: data.draw(st.sampled_from(HOSTILE))}
        response = call(api, session, case)
        case.validate_response(response, checks=CHECKS)
        assert "Traceback" not in response.text

    return run


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_fuzz_every_operation(api: Api, mode: str, quarantine: Any) -> None:
    generation = (schemathesis.GenerationMode.POSITIVE if mode == "positive"
                  else schemathesis.GenerationMode.NEGATIVE)
    session = requests.Session()
    exercised: set[tuple[str, str]] = set()
    nothing_to_negate: set[tuple[str, str]] = set()
    for operation in operations():
        label = (operation.method.upper(), operation.path)
        if operation.path in STREAMS:
            continue
        names = {p.name for p in operation.path_parameters}
        known = seed(api, quarantine if "fingerprint" in names else None)

        run = fuzz_operation(api, session, operation, generation, mode, known)
        try:
            run()
        except Unsatisfiable:
            nothing_to_negate.add(label)  # no parameters and no body: nothing to make invalid
            continue
        exercised.add(label)
    wanted = {(op.method.upper(), op.path) for op in operations() if op.path not in STREAMS}
    assert exercised | nothing_to_negate == wanted
    # Only a route without a body or query has nothing to negate (a path parameter's
    # only invalid value, "", cannot be sent).
    for op in operations():
        if (op.method.upper(), op.path) in nothing_to_negate:
            assert mode == "negative", op.path
            assert "requestBody" not in op.definition.raw, op.path
            assert not op.query, op.path
    # And the server is still healthy afterwards.
    assert api.get("/readyz").status_code == 200


# -- 2. the event stream ------------------------------------------------------------------

def test_fuzz_event_stream(api: Api) -> None:
    operation = SCHEMA["/events"]["GET"]
    session = requests.Session()

    @settings(max_examples=15, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=st.one_of(
        operation.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=schemathesis.GenerationMode.NEGATIVE)))
    def run(case: schemathesis.Case) -> None:
        kwargs = case.as_transport_kwargs(base_url=api.url)
        response = session.request(**kwargs, stream=True, timeout=30)
        try:
            assert response.status_code < 500
            assert str(response.status_code) in operation.definition.raw["responses"]
            if response.status_code == 200:
                assert response.headers["Content-Type"].startswith("text/event-stream")
                assert response.raw.read(11) == b": connected"
            else:
                assert response.headers["Content-Type"] == "application/json"
        finally:
            response.close()

    run()


# -- 3. stateful: the job lifecycle through the API ---------------------------------------

def check(response: requests.Response, path: str, method: str) -> requests.Response:
    """No 5xx, and the response is what the document says for this operation."""
    assert response.status_code < 500, response.text
    SCHEMA[path][method].validate_response(response)
    return response


class JobLifecycle(RuleBasedStateMachine):
    """A model of every job this machine made: its state, or None once deleted."""

    api: Api  # set by the test

    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.prefix = f"sm-{uuid.uuid4().hex[:8]}"
        self.queues = [f"{self.prefix}-a", f"{self.prefix}-b"]
        self.state: dict[str, str | None] = {}
        self.queue_of: dict[str, str] = {}
        self.claims: dict[str, Any] = {}
        self.payload: dict[str, bytes] = {}

    # -- helpers
    def req(self, method: str, template: str, path: str, **kw: Any) -> requests.Response:
        headers = dict(kw.pop("headers", {}))
        if method in MUTATING:
            headers.setdefault("Idempotency-Key", fresh_key())
        response = self.api.session.request(method, self.api.url + path, headers=headers,
                                            timeout=30, **kw)
        return check(response, template, method)

    def expect_transition(self, job_id: str, response: requests.Response,
                          allowed: dict[str, str]) -> None:
        before = self.state[job_id]
        if before is None:
            assert response.status_code == 404, response.text
        elif before in allowed:
            assert response.status_code == 204, (before, response.text)
            self.state[job_id] = allowed[before]
            if before == "running":
                self.claims.pop(job_id, None)
        else:
            assert response.status_code == 409, (before, response.text)

    # -- rules
    @initialize()
    def start(self) -> None:
        assert self.api.get("/readyz").status_code == 200

    @rule(target=jobs, queue=st.sampled_from([0, 1]),
          mode=st.sampled_from(["available", "scheduled", "pending"]),
          payload=st.binary(max_size=64), tags=st.lists(st.sampled_from(["x", "y", "z"]),
                                                        max_size=2, unique=True))
    def enqueue(self, queue: int, mode: str, payload: bytes, tags: list[str]) -> str:
        body: dict[str, Any] = {"kind": f"{self.prefix}.k", "queue": self.queues[queue],
                                "payload": base64.b64encode(payload).decode(),
                                "tags": tags, "max_attempts": 1}
        if mode == "pending":
            body["pending"] = True
        elif mode == "scheduled":
            body["scheduled_at_ms"] = self.api.store.now_ms() + 3_600_000
        key = fresh_key()
        first = self.req("POST", "/jobs", "/jobs", json=body,
                         headers={"Idempotency-Key": key})
        assert first.status_code == 201, first.text
        job_id = first.json()["id"]
        # The same request again is a replay: the same job, not a second one.
        again = self.req("POST", "/jobs", "/jobs", json=body, headers={"Idempotency-Key": key})
        assert again.status_code == 201 and again.json() == {"id": job_id, "replayed": True}
        self.state[job_id] = mode
        self.queue_of[job_id] = self.queues[queue]
        self.payload[job_id] = payload
        return str(job_id)

    @rule(job_id=jobs, include=st.booleans())
    def get(self, job_id: str, include: bool) -> None:
        params = {"include_payload": "true"} if include else {}
        r = self.req("GET", "/jobs/{job_id}", f"/jobs/{job_id}", params=params)
        if self.state[job_id] is None:
            assert r.status_code == 404
            return
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["state"] == self.state[job_id]
        if include:
            assert base64.b64decode(body["payload"]) == self.payload[job_id]
        else:
            assert "payload" not in body

    @rule(job_id=jobs)
    def cancel(self, job_id: str) -> None:
        r = self.req("POST", "/jobs/{job_id}/cancel", f"/jobs/{job_id}/cancel")
        self.expect_transition(job_id, r, {s: "cancelled" for s in
                                           ("pending", "scheduled", "available", "running")})

    @rule(job_id=jobs)
    def retry(self, job_id: str) -> None:
        r = self.req("POST", "/jobs/{job_id}/retry", f"/jobs/{job_id}/retry")
        self.expect_transition(job_id, r, {"archived": "available", "cancelled": "available"})

    @rule(job_id=jobs)
    def promote(self, job_id: str) -> None:
        r = self.req("POST", "/jobs/{job_id}/promote", f"/jobs/{job_id}/promote")
        self.expect_transition(job_id, r, {"pending": "available"})

    @rule(job_id=jobs)
    def reschedule(self, job_id: str) -> None:
        at = self.api.store.now_ms() + 7_200_000
        r = self.req("POST", "/jobs/{job_id}/reschedule", f"/jobs/{job_id}/reschedule",
                     json={"scheduled_at_ms": at})
        self.expect_transition(job_id, r, {"scheduled": "scheduled", "pending": "pending"})

    @rule(job_id=jobs, payload=st.binary(max_size=32))
    def edit_payload(self, job_id: str, payload: bytes) -> None:
        r = self.req("PUT", "/jobs/{job_id}/payload", f"/jobs/{job_id}/payload",
                     json={"payload": base64.b64encode(payload).decode()})
        state = self.state[job_id]
        if state is None:
            assert r.status_code == 404
        elif state == "running":
            assert r.status_code == 409
        else:
            assert r.status_code == 204, r.text
            self.payload[job_id] = payload

    @rule(job_id=jobs)
    def delete(self, job_id: str) -> None:
        r = self.req("DELETE", "/jobs/{job_id}", f"/jobs/{job_id}")
        assert r.status_code == (404 if self.state[job_id] is None else 204), r.text
        self.state[job_id] = None
        self.claims.pop(job_id, None)

    @rule(ids=st.lists(jobs, min_size=1, max_size=4, unique=True),
          action=st.sampled_from(["retry", "cancel", "delete", "archive"]))
    def actions(self, ids: list[str], action: str) -> None:
        r = self.req("POST", "/jobs/actions", "/jobs/actions",
                     json={"action": action, "ids": ids})
        assert r.status_code == 200, r.text
        body = r.json()
        allowed = {
            "retry": {"archived": "available", "cancelled": "available"},
            "cancel": {s: "cancelled" for s in ("pending", "scheduled", "available",
                                                "running")},
            "delete": {s: None for s in ("pending", "scheduled", "available", "running",
                                         "completed", "archived", "cancelled")},
            "archive": {},
        }[action]
        for job_id in ids:
            before = self.state[job_id]
            ok = before is not None and before in allowed
            assert (job_id in body["succeeded"]) == ok, (action, before, body)
            if ok:
                self.state[job_id] = allowed[before]
                if before == "running":
                    self.claims.pop(job_id, None)

    @rule(queue=st.sampled_from([0, 1]))
    def bulk_dry_run(self, queue: int) -> None:
        r = self.req("POST", "/jobs/bulk", "/jobs/bulk", json={
            "action": "cancel", "selector": {"queue": self.queues[queue]}, "dry_run": True})
        assert r.status_code == 202, r.text
        want = sum(1 for j, s in self.state.items()
                   if s in ("pending", "scheduled", "available", "running")
                   and self.queue_of[j] == self.queues[queue])
        assert r.json()["total_estimated"] == want

    @rule(queue=st.sampled_from([0, 1]),
          outcome=st.sampled_from([Outcome.SUCCESS, Outcome.SKIP, Outcome.RETRY, None]))
    def work(self, queue: int, outcome: Outcome | None) -> None:
        """A worker takes one job (outside the API, as a worker process would)."""
        claims = self.api.store.admit(f"{self.prefix}-w", [self.queues[queue]], capacity=1)
        if not claims:
            assert not any(s == "available" and self.queue_of[j] == self.queues[queue]
                           for j, s in self.state.items())
            return
        claim = claims[0]
        job_id = claim.job.id
        assert self.state[job_id] == "available"
        self.state[job_id] = "running"
        if outcome is None:
            self.claims[job_id] = claim  # stays running
            return
        self.api.store.ack(claim, outcome)
        # max_attempts is 1 (and a retry adds exactly one): a failed attempt is final.
        self.state[job_id] = "completed" if outcome is Outcome.SUCCESS else "archived"

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data())
    def finish_running(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.claims)))
        self.api.store.ack(self.claims.pop(job_id), Outcome.SUCCESS)
        self.state[job_id] = "completed"

    # -- what must always hold
    @invariant()
    def listing_and_counts_match_the_model(self) -> None:
        for queue in self.queues:
            r = self.req("GET", "/jobs", "/jobs", params={"queue": queue, "limit": "200"})
            assert r.status_code == 200
            listed = {j["id"]: j["state"] for j in r.json()["jobs"]}
            assert all("payload" not in j for j in r.json()["jobs"])
            want = {j: s for j, s in self.state.items()
                    if s is not None and self.queue_of[j] == queue}
            assert listed == want
            counts = self.req("GET", "/jobs/counts", "/jobs/counts",
                              params={"queue": queue}).json()["counts"]
            for state in counts:
                assert counts[state] == sum(1 for s in want.values() if s == state), state

    def teardown(self) -> None:
        for claim in self.claims.values():
            try:
                self.api.store.ack(claim, Outcome.SUCCESS)
            except headgate.HeadgateError:
                pass


def test_stateful_job_lifecycle(api: Api) -> None:
    JobLifecycle.api = api
    run_state_machine_as_test(JobLifecycle, settings=settings(
        max_examples=STATEFUL_EXAMPLES, stateful_step_count=STATEFUL_STEPS, deadline=None,
        database=None, derandomize=True, suppress_health_check=list(HealthCheck)))
