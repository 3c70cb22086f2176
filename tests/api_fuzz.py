"""Schemathesis's own engine, every phase (examples, coverage, fuzzing, stateful), against
a live headgate API: the driver behind tests/api/test_fuzz_stateful.py (a bounded run on
both backends) and bench/fuzz_api.py (an hour, by hand, against `headgate serve`).

The document says what a request may hold and, through its links, how one response
leads to the next request; the few things it cannot say come from here:

- a fresh Idempotency-Key on every mutation (a generated one repeats, and a repeat only
  tests the replay path);
- things only a worker creates: every job the API enqueues that is due at once is run
  by a worker acting on the store (progress, output, a result), so the job's result,
  output and progress routes have something to answer; a live worker and a quarantined
  fingerprint are seeded before the run for the worker and quarantine routes;
- existing names and ids, offered as dictionaries to the non-stateful phases.

Every response is checked by schemathesis (no 5xx, status code, content type, headers
and body as documented, a deleted thing stays gone, a created thing is there, a missing
required header is refused, an undocumented method is a 405), and a sample of refused
mutations is checked here to have changed nothing: the store's observable state (counts
by state, queue settings, rate classes, concurrency limits, schedules, quarantine,
workers' signals, the audit log, and the job the path names) is the same before and
after a 4xx.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema
from schemathesis.engine.run import PhaseName

import headgate
from headgate.api.openapi import document
from headgate.core import Outcome
from headgate.core.records import WorkerBeat
from headgate.store.port import Store

MUTATING = {"POST", "PUT", "DELETE"}
CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_schema_conformance", "response_headers_conformance", "use_after_free",
          "missing_required_header", "unsupported_method")
# Every check schemathesis has that is not above: off, each for a reason.
OFF = {
    # Strings the document allows but the server refuses exist by design: a cron
    # expression that never fires, an unknown CRON_TZ zone, a `q` term it cannot parse.
    "positive_data_acceptance": "some constraints are not expressible in JSON Schema",
    # A body field the server ignores (unknown fields are ignored on purpose) makes
    # "negative" data that is accepted.
    "negative_data_rejection": "unknown body fields are ignored by design",
    # Jobs also go by selection (POST /jobs/actions), bulk operation, queue deletion and
    # retention 0 at completion, none of which the check knows as a deletion.
    "ensure_resource_availability": "jobs are deleted in ways the check cannot see",
    "ignored_auth": "no tokens are configured (security is optional)",
    "object_level_authorization": "one caller",
    "allow_header_conformance": "checked by tests/api/test_conventions.py",
}

# Checks that do not apply to an operation, and why: turned off for it in the config,
# so schemathesis neither runs them there nor counts them in its phases' status.
NOT_APPLICABLE = {
    # A queue's history and percentiles are views over what happened under its name:
    # they answer for any name (an empty list, zero counts), before the queue exists
    # and after it is deleted.
    ("use_after_free", "GET /queues/{queue}/history"): "a view by name",
    ("use_after_free", "GET /queues/{queue}/latency"): "a view by name",
    ("use_after_free", "GET /kinds/{kind}/latency"): "a view by name",
    # Deleting a schedule keeps its enqueue events (documented on DELETE).
    ("use_after_free", "GET /periodic/{schedule_id}/enqueue-events"): "events are kept",
}


@dataclass
class Report:
    """What a run saw. `failures` and `errors` must be empty for a pass."""

    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cases: Counter[str] = field(default_factory=Counter)  # by phase
    statuses: Counter[str] = field(default_factory=Counter)  # "phase status-class"
    stateful_2xx: set[str] = field(default_factory=set)  # operation labels
    stateful_seen: set[str] = field(default_factory=set)
    any_2xx: set[str] = field(default_factory=set)  # in any phase
    refused_checked: int = 0
    refused_skipped: int = 0
    changed_by_refused: list[str] = field(default_factory=list)
    worked_jobs: int = 0
    pending_operations: dict[str, str] = field(default_factory=dict)
    phases: dict[str, str] = field(default_factory=dict)  # schemathesis's status of each
    seconds: float = 0.0

    def failed_phases(self) -> dict[str, str]:
        """The phases schemathesis itself did not pass: its verdict, beside the driver's."""
        return {p: s for p, s in self.phases.items() if s in ("failure", "error")}

    def summary(self) -> str:
        return (f"{sum(self.cases.values())} cases ({dict(self.cases)}), "
                f"statuses {dict(sorted(self.statuses.items()))}, "
                f"stateful 2xx on {len(self.stateful_2xx)} operations, "
                f"{self.refused_checked} refused mutations compared "
                f"({self.refused_skipped} skipped: an operation was running), "
                f"{self.worked_jobs} jobs run by the worker, "
                f"{len(self.failures)} failures, {len(self.errors)} errors, "
                f"{len(self.changed_by_refused)} refused requests that changed state, "
                f"phases {self.phases}, {self.seconds:.0f} s")


def excluded(method: str, path: str) -> bool:
    """Operations a run leaves out: the event stream never ends (tests/api/test_fuzz.py
    opens it and checks its start); the remote-worker protocol (register, heartbeat,
    claim, and the per-lease routes) long-polls on a claim and acts on leases only a
    registered worker holds, so it is exercised by its own tests."""
    if path == "/events":
        return True
    if path == "/workers":
        return method.upper() == "POST"
    if path == "/workers/{worker_id}":
        return method.upper() == "DELETE"
    return path.startswith("/workers/{worker_id}/") and path != "/workers/{worker_id}/signal"


def link_targets() -> set[str]:
    """The operations a link leads to: a stateful run reaches these through them."""
    by_id = {op["operationId"]: f"{method.upper()} {path}"
             for path, ops in document()["paths"].items() for method, op in ops.items()}
    return {by_id[link["operationId"]] for ops in document()["paths"].values()
            for op in ops.values() for response in op["responses"].values()
            for link in response.get("links", {}).values()}


def labels() -> set[str]:
    """Every operation a run covers."""
    return {f"{method.upper()} {path}" for path, ops in document()["paths"].items()
            for method in ops if not excluded(method, path)}


# -- what a run needs that the API cannot make -----------------------------------------

def seed(store: Store) -> dict[str, list[str]]:
    """One of everything a path can name, the things only a worker makes among them."""
    c = headgate.Client(store)
    tag = uuid.uuid4().hex[:6]
    queue = f"fuzz-{tag}"
    ids = [c.enqueue("fuzz.available", b'{"n":1}', queue=queue),
           c.enqueue("fuzz.scheduled", b"", queue=queue,
                     scheduled_at_ms=store.now_ms() + 3_600_000),
           c.enqueue("fuzz.pending", b"", queue=queue, pending=True)]
    worked = c.enqueue("fuzz.worked", b"{}", queue=f"work-{tag}")
    work(store, worked, f"work-{tag}")
    ids += [worked] * 3  # the one job with a result, output and progress: drawn often
    cancelled = c.enqueue("fuzz.cancelled", b"", queue=queue)
    store.operator_cancel(cancelled)
    ids.append(cancelled)
    store.upsert_schedule({"id": f"fuzz-{tag}", "kind": "fuzz.tick", "spec": "@every:60000"})
    store.upsert_rate_class(f"rc-{tag}", 5, 1000)
    store.upsert_concurrency_limit(f"cl-{tag}", queue, 2)
    store.heartbeat(WorkerBeat(f"w-{tag}", host="fuzz", queues=(queue,), concurrency=1))
    op = store.create_operation("retry", {"queue": queue}, dry_run=True)
    return {"job_id": ids, "queue": [queue, f"work-{tag}"], "schedule_id": [f"fuzz-{tag}"],
            "name": [f"rc-{tag}", f"cl-{tag}"], "op_id": [op.id],
            "worker_id": [f"w-{tag}"], "kind": ["fuzz.worked", "fuzz.pending"],
            "fingerprint": [quarantine(store, f"fuzz.crash.{tag}")]}


def quarantine(store: Store, kind: str) -> str:
    """A fingerprint quarantined the real way: its job loses its lease three times."""
    fp = headgate.fingerprint(kind, b"boom")
    queue = f"crash-{fp[:8]}"
    job_id = headgate.Client(store).enqueue(kind, b"boom", queue=queue)
    while (job := store.get_job(job_id)) is not None and job.state is not (
            headgate.State.QUARANTINED):
        if job.state is headgate.State.RETRYABLE:
            store.reschedule_job(job_id, 0)
        if job.state is not headgate.State.RUNNING:
            store.admit("crasher", [queue], capacity=1, lease_ms=30)
        time.sleep(0.04)
        store.reclaim_expired()
    return fp


def work(store: Store, job_id: str, queue: str) -> bool:
    """Run `job_id` as a worker would, if it is the one its queue admits next: progress,
    output, then success with a result."""
    claims = store.admit(f"fuzz-worker-{uuid.uuid4().hex[:4]}", [queue], capacity=1)
    for claim in claims:
        store.report_progress(claim, 1, 1, "done")
        store.write_output(claim, b'{"partial":true}')
        store.ack(claim, Outcome.SUCCESS, result=b'{"ok":true}')
    return any(claim.job.id == job_id for claim in claims)


# -- state a refused request must leave alone -----------------------------------------

def snapshot(store: Store, path_params: dict[str, Any]) -> dict[str, Any]:
    job_id = path_params.get("job_id")
    job = store.get_job(job_id, include_payload=True) if isinstance(job_id, str) else None
    return {
        "counts": store.counts(),
        "queues": sorted((q.queue, q.weight, q.paused, q.max_unfinished_jobs)
                         for q in store.queue_stats()),
        "rate_classes": sorted((r.name, r.limit_per_window, r.window_ms, r.burst, r.paused)
                               for r in store.rate_classes()),
        "concurrency_limits": sorted(repr(c) for c in store.concurrency_limits()),
        "schedules": sorted(repr(s) for s in store.list_schedules()),
        "quarantine": sorted(repr(q) for q in store.quarantine_list()),
        "signals": sorted((w.worker_id, w.pending_signal)
                          for w in store.list_workers(3_600_000)),
        "audit": [e.id for e in store.list_audit(limit=1)],
        "job": None if job is None else (job.state, job.payload, job.scheduled_at_ms,
                                         job.fingerprint, job.schema_version, job.attempt),
    }


class Driver:
    """Hooks around every request schemathesis sends (one run at a time)."""

    active: Driver | None = None

    def __init__(self, store: Store, report: Report, compare_every: int) -> None:
        self.store = store
        self.report = report
        self.compare_every = compare_every
        self.mutations = itertools.count()
        # One request at a time (one engine worker): the snapshot taken before it.
        self.before: tuple[str, dict[str, Any], bool] | None = None
        self.operations: set[str] = set()
        self.lock = threading.Lock()

    def quiet(self) -> bool:
        """No bulk operation is left to run (one would change state on its own): the
        driver finishes them itself, beside the server's runner."""
        for _ in range(20):
            if not self.store.run_operations_batch(500):
                break
        for op_id in list(self.operations):
            op = self.store.get_operation(op_id)
            if op is None or op.status in ("done", "failed"):
                self.operations.discard(op_id)
            else:
                self.report.pending_operations[op_id] = repr(op)
        return not self.operations

    def before_call(self, case: schemathesis.Case) -> None:
        if case.method.upper() not in MUTATING:
            return
        headers = case.headers or {}
        if "Idempotency-Key" in headers:  # a missing one stays missing (a check sends none)
            case.headers = {**headers, "Idempotency-Key": f"fz-{uuid.uuid4().hex}"}
        self.before = None
        if next(self.mutations) % self.compare_every == 0:
            quiet = self.quiet()  # first: it runs what bulk operations are left
            params = dict(case.path_parameters or {})
            self.before = (case.id, snapshot(self.store, params), quiet)

    def after_call(self, case: schemathesis.Case, response: Any) -> None:
        method = case.method.upper()
        status = response.status_code
        label = f"{method} {case.operation.path}"
        taken, self.before = self.before, None
        if taken is not None and taken[0] == case.id and 400 <= status < 500:
            _, before, quiet = taken
            if quiet and self.quiet():
                after = snapshot(self.store, dict(case.path_parameters or {}))
                self.report.refused_checked += 1
                if after != before:
                    changed = sorted(k for k in before if before[k] != after[k])
                    self.report.changed_by_refused.append(
                        f"{label} -> {status} changed {changed}: {response.text[:200]}")
            else:
                self.report.refused_skipped += 1
        if status == 202 and label in ("POST /jobs/bulk", "DELETE /queues/{queue}"):
            body = response.json()
            self.operations.add(body.get("id") or body.get("operation_id"))
        if (label == "POST /jobs" and status == 201) or (
                label == "POST /periodic/{schedule_id}/run" and status == 202):
            self.run_job(response.json()["id"])

    def run_job(self, job_id: str) -> None:
        """Three jobs in four that are due at once are run by the worker."""
        job = self.store.get_job(job_id)
        # Retention 0: a completed job is deleted at once, with its result.
        if job is None or job.state is not headgate.State.AVAILABLE or job.retention_ms == 0:
            return
        if hashlib.sha256(job_id.encode()).digest()[0] % 4 == 0:
            return
        if work(self.store, job_id, job.queue):
            self.report.worked_jobs += 1


@schemathesis.hook
def before_call(context: Any, case: schemathesis.Case, kwargs: dict[str, Any]) -> None:
    if Driver.active is not None:
        Driver.active.before_call(case)


@schemathesis.hook
def after_call(context: Any, case: schemathesis.Case, response: Any) -> None:
    if Driver.active is not None:
        Driver.active.after_call(case, response)


# -- the run ---------------------------------------------------------------------------

def config(base_url: str, known: dict[str, list[str]], *, max_examples: int,
           stateful_examples: int, max_steps: int, max_time: int | None,
           seed_value: int | None, coverage: bool = True) -> SchemathesisConfig:
    data: dict[str, Any] = {
        "base-url": base_url,
        "workers": 1,
        "request-timeout": 30,
        "max-stream-events": 1,
        "suppress-health-check": ["all"],
        "generation": {"max-examples": max_examples, "mode": "all", "allow-x00": True,
                       "database": "none"},
        "phases": {"coverage": {"enabled": coverage},
                   "stateful": {"max-steps": max_steps,
                                "generation": {"max-examples": stateful_examples}}},
        "checks": {**{name: {"enabled": True} for name in CHECKS},
                   **{name: {"enabled": False} for name in OFF}},
        "operations": [
            {"include-method": label.split(" ", 1)[0], "include-path": label.split(" ", 1)[1],
             "checks": {check: {"enabled": False}}}
            for check, label in NOT_APPLICABLE],
        "dictionaries": {f"known-{name}": {"values": values} for name, values in known.items()},
        "parameters": {f"path.{name}": {"dictionary": f"known-{name}", "probability": 0.5}
                       for name in known},
    }
    if max_time is not None:
        data["max-time"] = max_time
    if seed_value is not None:
        data["seed"] = seed_value
    return SchemathesisConfig.from_dict(data)


def run(base_url: str, store: Store, *, max_examples: int = 10, stateful_examples: int = 50,
        max_steps: int = 30, max_time: int | None = None, seed_value: int | None = None,
        compare_every: int = 3, log: Callable[[str], None] | None = None,
        coverage: bool = True) -> Report:
    """One engine run against `base_url` (…/api/v1) on `store`, the server's store.
    `coverage=False` leaves out the coverage phase (boundary values, mostly refused by
    validation before the store is reached)."""
    report = Report()
    known = seed(store)
    cfg = config(base_url, known, max_examples=max_examples,
                 stateful_examples=stateful_examples, max_steps=max_steps,
                 max_time=max_time, seed_value=seed_value, coverage=coverage)
    schema = schemathesis.openapi.from_dict(document(), config=cfg).exclude(
        func=lambda ctx: excluded(ctx.operation.method, ctx.operation.path))
    driver = Driver(store, report, compare_every)
    started = time.monotonic()
    Driver.active = driver
    try:
        for event in from_schema(schema).execute():
            _record(event, report, log)
    finally:
        Driver.active = None
        report.seconds = time.monotonic() - started
    return report


def _record(event: Any, report: Report, log: Callable[[str], None] | None) -> None:
    if isinstance(event, events.ScenarioFinished | events.FuzzScenarioFinished):
        phase = getattr(event, "phase", PhaseName.FUZZING)
        recorder = event.recorder
        for case_id, node in recorder.cases.items():
            report.cases[str(phase)] += 1
            interaction = recorder.interactions.get(case_id)
            if interaction is None or interaction.response is None:
                continue
            status = interaction.response.status_code
            report.statuses[f"{phase} {status // 100}xx"] += 1
            case = node.value
            label = f"{case.method.upper()} {case.operation.path}"
            if 200 <= status < 300:
                report.any_2xx.add(label)
            if phase == PhaseName.STATEFUL_TESTING:
                report.stateful_seen.add(label)
                if 200 <= status < 300:
                    report.stateful_2xx.add(label)
        for case_id, checks in recorder.checks.items():
            for check in checks:
                if check.failure_info is None:
                    continue
                case = recorder.cases[case_id].value
                response = recorder.interactions.get(case_id)
                got = "" if response is None or response.response is None else (
                    f" -> {response.response.status_code} "
                    f"{response.response.content[:300]!r}")
                text = (f"[{phase}] {check.name}: {case.method.upper()} "
                        f"{_url(case)}{got}: {check.failure_info.failure.title}")
                report.failures.append(text)
                if log:
                    log(text)
    elif isinstance(event, events.NonFatalError | events.FatalError):
        text = f"{type(event).__name__}: {getattr(event, 'label', '')} " + str(
            getattr(event, "value", None) or getattr(event, "exception", ""))
        report.errors.append(text)
        if log:
            log(text)
    elif isinstance(event, events.PhaseFinished):
        report.phases[event.phase.name.value] = event.status.value
        if log:
            log(f"phase {event.phase.name} finished: {event.status}")


def _url(case: schemathesis.Case) -> str:
    path = case.formatted_path if hasattr(case, "formatted_path") else case.path
    return unquote(urlsplit(str(path)).path)
