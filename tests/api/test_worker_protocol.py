"""The worker protocol over /api/v1: a worker in any language registers, claims,
extends, finishes and heartbeats over real HTTP, on both engines, under the same
admission as a Python worker; fencing, capacity, signals, aging and bad input."""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import headgate
from headgate.core import State
from headgate.core.records import WorkerBeat
from headgate.services.config import Settings, read_tokens_file
from headgate.services.duties import DutyRunner
from headgate.worker.remote import RemoteWorkers

if TYPE_CHECKING:
    from api_helpers import Api, Servers

pytest_plugins = ["api_helpers"]  # the real-HTTP server fixtures


def register(api: Api, queues: list[str], capacity: int = 2, **extra: Any) -> str:
    r = api.post("/workers", json={"queues": queues, "capacity": capacity,
                                   "agent": "test-agent/1", **extra})
    assert r.status_code == 201, r.text
    return str(r.json()["worker_id"])


def claim(api: Api, worker: str, **body: Any) -> list[dict[str, Any]]:
    r = api.post(f"/workers/{worker}/claim", json=body)
    assert r.status_code == 200, r.text
    return list(r.json()["jobs"])


def lease(job: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"lease_id": job["lease_id"], "fence": job["fence"], **extra}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def snapshot(api: Api, job_id: str) -> tuple[Any, ...]:
    job = api.store.get_job(job_id)
    assert job is not None
    return (job.state, job.attempt, job.fence, job.lease_id, job.worker_id, len(job.errors),
            job.scheduled_at_ms)


def test_register_claim_progress_extend_complete(api: Api) -> None:
    job_id = api.enqueue("email.send", b'{"to": "a@example.com"}', queue="mail")
    worker = register(api, ["mail"], capacity=2, kinds=["email.send"])
    [job] = claim(api, worker, max=1)
    assert (job["id"], job["kind"], job["queue"]) == (job_id, "email.send", "mail")
    assert base64.b64decode(job["payload"]) == b'{"to": "a@example.com"}'
    assert job["fence"] == 1 and job["lease_id"]
    stored = api.store.get_job(job_id)
    assert stored is not None and stored.state is State.RUNNING
    assert stored.worker_id == worker  # the job's page names the worker

    r = api.post(f"/workers/{worker}/jobs/{job_id}/progress",
                 json=lease(job, current=1, total=2, message="halfway"))
    assert r.status_code == 204, r.text
    progress = api.store.get_progress(job_id)
    assert progress is not None and (progress.current, progress.total) == (1, 2)
    r = api.post(f"/workers/{worker}/jobs/{job_id}/extend", json=lease(job, lease_ms=60_000))
    assert r.status_code == 200 and r.json()["lease_expires_at_ms"] > job["lease_expires_at_ms"]
    r = api.post(f"/workers/{worker}/jobs/{job_id}/complete",
                 json=lease(job, result=b64(b"5"), output=b64(b"log line")))
    assert r.status_code == 204, r.text
    assert api.get(f"/jobs/{job_id}").json()["state"] == "completed"
    assert api.get(f"/jobs/{job_id}/result").json()["bytes"] == b64(b"5")
    assert api.get(f"/jobs/{job_id}/output").json()["bytes"] == b64(b"log line")

    [row] = [w for w in api.get("/workers").json() if w["worker_id"] == worker]
    assert (row["agent"], row["kinds"], row["concurrency"], row["queues"]) == (
        "test-agent/1", ["email.send"], 2, ["mail"])


def test_fail_outcomes_and_snooze(api: Api) -> None:
    assert api.put("/rate-classes/api", json={"limit": 100, "window_ms": 60_000}).ok
    ids = [api.enqueue("k", queue="q", max_attempts=3) for _ in range(3)]
    throttled = api.enqueue("k", queue="q", rate_class="api")
    worker = register(api, ["q"], capacity=4)
    jobs = {j["id"]: j for j in claim(api, worker, max=4)}
    assert set(jobs) == {*ids, throttled}
    r = api.post(f"/workers/{worker}/jobs/{ids[0]}/fail",
                 json=lease(jobs[ids[0]], error="boom", retry_in_ms=60_000, logs=["l1"]))
    assert r.json() == {"outcome": "retry"}
    retried = api.store.get_job(ids[0])
    assert retried is not None and retried.state is State.RETRYABLE
    assert retried.errors[-1]["error"] == "boom" and retried.attempt == 1
    r = api.post(f"/workers/{worker}/jobs/{ids[1]}/fail",
                 json=lease(jobs[ids[1]], error="bad input", outcome="skip"))
    assert r.json() == {"outcome": "skip"}
    assert api.get(f"/jobs/{ids[1]}").json()["state"] == "archived"
    # A throttle without a rate class is a snooze (no attempt spent), as in Python.
    r = api.post(f"/workers/{worker}/jobs/{ids[2]}/fail",
                 json=lease(jobs[ids[2]], error="429", outcome="rate_limited"))
    assert r.json() == {"outcome": "snooze"}
    snoozed = api.store.get_job(ids[2])
    assert snoozed is not None and snoozed.state is State.SCHEDULED and snoozed.attempt == 0
    # With a class: back to available and the class emptied for the hint, fleet-wide.
    r = api.post(f"/workers/{worker}/jobs/{throttled}/fail",
                 json=lease(jobs[throttled], error="429", outcome="rate_limited",
                            retry_in_ms=60_000))
    assert r.json() == {"outcome": "rate_limited"}
    assert api.get(f"/jobs/{throttled}").json()["state"] == "available"
    [cls] = api.get("/rate-classes").json()
    assert cls["tokens_available"] < 0
    assert claim(api, worker) == []  # the class admits nothing now, to anyone

    later = api.enqueue("k", queue="q")
    [job] = claim(api, worker, max=1)
    assert job["id"] == later
    r = api.post(f"/workers/{worker}/jobs/{later}/snooze", json=lease(job, delay_ms=60_000))
    assert r.status_code == 204
    snoozed = api.store.get_job(later)
    assert snoozed is not None and snoozed.state is State.SCHEDULED and snoozed.attempt == 0


def test_claims_take_the_same_admission_as_python_workers(api: Api) -> None:
    """A rate class and a concurrency ceiling hold across an HTTP worker and a Python
    worker's store.admit: the budget is spent once, whoever claims."""
    r = api.put("/rate-classes/slow", json={"limit": 3, "window_ms": 3_600_000, "burst": 3})
    assert r.status_code == 200, r.text
    for _ in range(6):
        api.enqueue("k", queue="rated", rate_class="slow")
    http_worker = register(api, ["rated"], capacity=2)
    got = claim(api, http_worker, max=2)
    python_claims = api.store.admit("python-worker", ["rated"], 4)
    assert len(got) + len(python_claims) == 3
    counts = api.store.counts("rated")
    assert counts["running"] == 3 and counts["available"] == 3

    r = api.put("/concurrency-limits/one", json={"queue": "capped", "max_concurrent": 1,
                                                "on_saturated": "queue"})
    assert r.status_code == 200, r.text
    for _ in range(3):
        api.enqueue("k", queue="capped")
    capped = register(api, ["capped"], capacity=3)
    first = claim(api, capped)
    assert len(first) == 1
    assert api.store.admit("python-worker", ["capped"], 3) == []
    r = api.post(f"/workers/{capped}/jobs/{first[0]['id']}/complete", json=lease(first[0]))
    assert r.status_code == 204
    assert len(api.store.admit("python-worker", ["capped"], 3)) == 1
    assert claim(api, capped) == []


def test_a_worker_never_holds_more_than_its_capacity(api: Api) -> None:
    for _ in range(5):
        api.enqueue("k", queue="cap")
    worker = register(api, ["cap"], capacity=2)
    r = api.post(f"/workers/{worker}/claim", json={"max": 3})
    assert r.status_code == 400 and r.json() == {"error": "max must be <= 2"}
    assert len(claim(api, worker, max=1)) == 1
    r = api.post(f"/workers/{worker}/claim", json={"max": 2})
    assert r.status_code == 409
    assert r.json() == {"error": f"claim past capacity: worker {worker} holds 1 of 2",
                        "capacity": 2, "held": 1, "free": 1}
    assert len(claim(api, worker)) == 1  # the free slot
    r = api.post(f"/workers/{worker}/claim", json={})
    assert r.status_code == 409 and r.json()["held"] == 2
    assert api.store.counts("cap")["running"] == 2  # nothing changed by the refusals


def test_stale_fence_is_409_and_changes_nothing(api: Api) -> None:
    job_id = api.enqueue("k", queue="f")
    worker = register(api, ["f"], capacity=1)
    [old] = claim(api, worker, lease_ms=1)
    time.sleep(0.01)
    assert api.store.reclaim_expired() == 1  # the reclaimer duty's step
    deadline = time.monotonic() + 10
    new: list[headgate.Claim] = []
    while not new and time.monotonic() < deadline:  # past the crash backoff
        api.store.promote_due()
        new = api.store.admit("python-worker", ["f"], 1)
        time.sleep(0.05)
    [new_claim] = new
    assert new_claim.fence == old["fence"] + 1
    before = snapshot(api, job_id)
    for verb, body in (("complete", lease(old)),
                       ("fail", lease(old, error="late")),
                       ("snooze", lease(old, delay_ms=1)),
                       ("extend", lease(old)),
                       ("progress", lease(old, current=1, total=1))):
        r = api.post(f"/workers/{worker}/jobs/{job_id}/{verb}", json=body)
        assert r.status_code == 409, (verb, r.text)
        assert r.json() == {"error": f"job {job_id} is not held by worker {worker}",
                            "state": "running"}
    assert snapshot(api, job_id) == before

    # The same worker, its own job, an older fence: refused by the fence itself.
    job2 = api.enqueue("k", queue="f2")
    w2 = register(api, ["f2"], capacity=1)
    [held] = claim(api, w2)
    r = api.post(f"/workers/{w2}/jobs/{job2}/complete", json=lease(held, fence=held["fence"] - 1))
    assert r.status_code == 409
    assert r.json() == {"error": f"stale fence: job {job2} is at fence {held['fence']}, not "
                                 f"{held['fence'] - 1}", "fence": held["fence"]}
    r = api.post(f"/workers/{w2}/jobs/{job2}/complete", json=lease(held, lease_id="0" * 32))
    assert r.status_code == 409
    assert snapshot(api, job2)[0] is State.RUNNING


def test_bad_input_is_4xx_with_the_error_body_and_changes_nothing(api: Api) -> None:
    job_id = api.enqueue("k", queue="b")
    worker = register(api, ["b"], capacity=1)
    [job] = claim(api, worker)
    before = snapshot(api, job_id)
    cases = [
        ("/workers/nobody/claim", {}, 404, {"error": "worker not found: nobody"}),
        ("/workers/nobody/heartbeat", {}, 404, {"error": "worker not found: nobody"}),
        (f"/workers/nobody/jobs/{job_id}/complete", lease(job), 404,
         {"error": "worker not found: nobody"}),
        (f"/workers/{worker}/jobs/missing/complete", lease(job), 404,
         {"error": "job not found: missing"}),
        (f"/workers/{worker}/jobs/{job_id}/complete", {"fence": 1}, 422,
         {"error": "missing field `lease_id`"}),
        (f"/workers/{worker}/jobs/{job_id}/complete", lease(job, fence="1"), 422,
         {"error": "invalid request body"}),
        (f"/workers/{worker}/jobs/{job_id}/complete", lease(job, result="not base64!"), 400,
         {"error": "result must be base64"}),
        (f"/workers/{worker}/jobs/{job_id}/fail", lease(job, error="x", outcome="explode"),
         400, {"error": "outcome must be one of retry|skip|rate_limited|throttled|undecodable"}),
        (f"/workers/{worker}/jobs/{job_id}/fail", lease(job), 422,
         {"error": "missing field `error`"}),
        (f"/workers/{worker}/heartbeat", {"running": [{"job_id": 1}]}, 422,
         {"error": "invalid request body"}),
        (f"/workers/{worker}/claim", {"wait_ms": 60_000}, 400,
         {"error": "wait_ms must be <= 30000"}),
        (f"/workers/{worker}/claim", [], 422, {"error": "invalid request body"}),
        ("/workers", {"queues": [], "capacity": 1}, 400,
         {"error": "queues must name at least one queue"}),
        ("/workers", {"queues": ["b"], "capacity": 0}, 400,
         {"error": "capacity must be >= 1"}),
        ("/workers", {"queues": ["b"]}, 422, {"error": "missing field `capacity`"}),
    ]
    for path, body, status, answer in cases:
        r = api.post(path, json=body)
        assert (r.status_code, r.json()) == (status, answer), path
    r = api.post(f"/workers/{worker}/claim", data="{", headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()) == (400, {"error": "bad json"})
    r = api.post(f"/workers/{worker}/claim", data="{}", headers={"Content-Type": "text/plain"})
    assert (r.status_code, r.json()) == (415, {"error": "expected Content-Type: application/json"})
    r = api.post(f"/workers/{worker}/claim", json={}, key=False)
    assert (r.status_code, r.json()) == (
        400, {"error": "Idempotency-Key header is required on every mutating request"})
    # A Python worker's id cannot be driven over HTTP.
    api.store.heartbeat(WorkerBeat("py-1", host="h", pid=1, queues=("b",), concurrency=1))
    r = api.post("/workers/py-1/claim", json={})
    assert r.status_code == 409 and "Python worker" in r.json()["error"]
    r = api.post("/workers", json={"queues": ["b"], "capacity": 1, "worker_id": "py-1"})
    assert r.status_code == 409
    assert snapshot(api, job_id) == before

    # A deregistered worker: its job went back uncharged; its acks are refused.
    r = api.delete(f"/workers/{worker}")
    assert r.status_code == 200 and r.json() == {"worker_id": worker, "released": 1}
    released = snapshot(api, job_id)
    assert released[0] is State.AVAILABLE and released[1] == 0
    for verb in ("complete", "extend"):
        r = api.post(f"/workers/{worker}/jobs/{job_id}/{verb}", json=lease(job))
        assert (r.status_code, r.json()) == (
            409, {"error": f"worker {worker} is deregistered; register again"})
    r = api.post(f"/workers/{worker}/heartbeat", json={})
    assert r.status_code == 409
    assert snapshot(api, job_id) == released
    [row] = [w for w in api.get("/workers").json() if w["worker_id"] == worker]
    assert row["status"] == "stopped"


def test_heartbeat_carries_signals_and_cancels(api: Api) -> None:
    job_id = api.enqueue("k", queue="s")
    worker = register(api, ["s"], capacity=2)
    [job] = claim(api, worker)
    assert api.post(f"/workers/{worker}/signal", json={"command": "quiet"}).status_code == 204
    r = api.post(f"/workers/{worker}/heartbeat", json={})
    assert r.json()["signal"] == "quiet" and r.json()["status"] == "quiet"
    other = api.enqueue("k", queue="s")
    r = api.post(f"/workers/{worker}/claim", json={})
    assert r.json() == {"jobs": [], "status": "quiet"}  # quiet: nothing more taken
    r = api.post(f"/workers/{worker}/heartbeat", json={})
    assert r.json()["signal"] is None  # delivered once
    api.post(f"/workers/{worker}/signal", json={"command": "resume"})
    assert api.post(f"/workers/{worker}/heartbeat", json={}).json()["status"] == "running"
    [second] = claim(api, worker)
    assert second["id"] == other

    assert api.post(f"/jobs/{job_id}/cancel").status_code in (200, 204)
    r = api.post(f"/workers/{worker}/heartbeat", json={"running": [
        {"job_id": job_id, "fence": job["fence"]}, {"job_id": other, "fence": second["fence"]}]})
    assert r.json()["cancelled"] == [{"job_id": job_id, "fence": job["fence"]}]
    assert r.json()["inflight"] == 1
    r = api.post(f"/workers/{worker}/jobs/{job_id}/complete", json=lease(job))
    assert r.status_code == 409
    assert api.get(f"/jobs/{job_id}").json()["state"] == "cancelled"

    api.post(f"/workers/{worker}/signal", json={"command": "terminate"})
    assert api.post(f"/workers/{worker}/heartbeat", json={}).json()["status"] == "stopping"
    api.enqueue("k", queue="s")
    assert api.post(f"/workers/{worker}/claim", json={"wait_ms": 5_000}).json() == {
        "jobs": [], "status": "stopping"}


def test_long_poll_wakes_on_an_enqueue(api: Api) -> None:
    worker = register(api, ["lp"], capacity=1)
    answer: dict[str, Any] = {}

    def wait() -> None:
        answer["r"] = api.post(f"/workers/{worker}/claim", json={"wait_ms": 30_000})

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 10
    waiting = False
    while not waiting and time.monotonic() < deadline:  # the long poll holds the worker
        r = api.post(f"/workers/{worker}/claim", json={})
        waiting = r.status_code == 409 and "already waiting" in r.json()["error"]
        time.sleep(0.02)
    job_id = api.enqueue("k", queue="lp")
    waiter.join(40)
    assert waiting and answer["r"].status_code == 200
    assert [j["id"] for j in answer["r"].json()["jobs"]] == [job_id]


def dead_long_poll(api: Api, connect: Callable[[str, int], socket.socket]) -> None:
    # A worker killed mid-long-poll: its connection closes, and the job enqueued after
    # goes to a live worker, not to the dead one (where it would wait out a lease and be
    # charged a crash for a run that never happened).
    dead = register(api, ["gone"], capacity=1)
    live = register(api, ["gone"], capacity=1)
    host, port = api.base.split("://", 1)[1].split(":")
    body = b'{"wait_ms": 30000}'
    head = {**api.session.headers, "Host": f"{host}:{port}", "Content-Type": "application/json",
            "Content-Length": str(len(body)), "Idempotency-Key": "dead-poll", "Connection": "close"}
    sock = connect(host, int(port))
    sock.sendall(f"POST /api/v1/workers/{dead}/claim HTTP/1.1\r\n".encode()
                 + "".join(f"{k}: {v}\r\n" for k, v in head.items()).encode() + b"\r\n" + body)
    deadline = time.monotonic() + 10
    waiting = False
    while not waiting and time.monotonic() < deadline:  # the long poll holds the worker
        r = api.post(f"/workers/{dead}/claim", json={})
        waiting = r.status_code == 409 and "already waiting" in r.json()["error"]
    assert waiting
    sock.close()  # what a kill -9 does to it (over TLS too: no close_notify)
    job_id = api.enqueue("k", queue="gone")
    [job] = claim(api, live, wait_ms=20_000)
    assert job["id"] == job_id and job["fence"] == 1  # nobody claimed it before
    stored = api.store.get_job(job_id)
    assert stored is not None and stored.worker_id == live and stored.errors == []


def test_a_long_poll_whose_worker_died_claims_nothing(api: Api) -> None:
    dead_long_poll(api, lambda host, port: socket.create_connection((host, port), timeout=10))


def test_a_long_poll_over_tls_whose_worker_died_claims_nothing(
        servers: Servers, tmp_path: Path) -> None:
    # A server that terminates TLS itself (gunicorn with a certificate): its socket is an
    # SSL socket, whose own recv cannot peek.
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    api = servers.start(ssl_context=served, cafile=str(cert))
    client = ssl.create_default_context(cafile=str(cert))

    def connect(host: str, port: int) -> socket.socket:
        raw = socket.create_connection((host, port), timeout=10)
        return client.wrap_socket(raw, server_hostname=host)

    assert api.base.startswith("https://")
    dead_long_poll(api, connect)


def test_a_claim_whose_caller_left_during_admit_hands_the_jobs_back(api: Api) -> None:
    # The caller goes between the check before admit and the one after: what admit took
    # goes back to the queue uncharged.
    job_id = api.enqueue("k", queue="left")
    remote = RemoteWorkers(api.store)
    session = remote.register(queues=["left"], capacity=1, agent="test-agent/1")
    answers = iter([True, False])
    answer = remote.claim(session.worker_id, connected=lambda: next(answers))
    assert answer.claims == []
    job = api.store.get_job(job_id)
    assert job is not None and job.state is State.AVAILABLE
    assert (job.crash_attempt, job.attempt, job.errors, job.lease_id) == (0, 0, [], None)
    [again] = claim(api, register(api, ["left"]), max=1)  # and another worker runs it
    assert again["id"] == job_id


def test_a_retried_claim_replays_the_same_jobs(api: Api) -> None:
    ids = {api.enqueue("k", queue="idem") for _ in range(3)}
    worker = register(api, ["idem"], capacity=3)
    first = api.post(f"/workers/{worker}/claim", json={"max": 1}, key="claim-1")
    again = api.post(f"/workers/{worker}/claim", json={"max": 1}, key="claim-1")
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.json() == first.json()
    assert api.store.counts("idem")["running"] == 1
    assert {j["id"] for j in first.json()["jobs"]} <= ids


def test_kinds_it_does_not_handle_are_undecodable(api: Api) -> None:
    foreign = api.enqueue("other.kind", queue="k")
    mine = api.enqueue("mine", queue="k")
    worker = register(api, ["k"], capacity=2, kinds=["mine"])
    got = claim(api, worker)
    assert [j["id"] for j in got] == [mine]
    job = api.store.get_job(foreign)
    assert job is not None and job.state is State.UNDECODABLE
    assert f"no handler for kind 'other.kind' on worker {worker}" in job.errors[-1]["error"]


def test_aged_out_worker_jobs_reclaimed_by_the_duties(api: Api) -> None:
    """A worker that stops heartbeating and extending: the reclaimer takes its job back
    (a crash, as for a Python worker), another worker runs it, and the aging duty
    forgets the worker, whose calls then answer 404."""
    job_id = api.enqueue("k", queue="age")
    worker = register(api, ["age"], capacity=1)
    [job] = claim(api, worker, lease_ms=200)
    time.sleep(0.3)
    runner = DutyRunner(api.store, intervals={"reclaimer": 0.05, "promoter": 0.05,
                                              "worker_aging": 0.05},
                        duties=["reclaimer", "promoter", "worker_aging"],
                        forget_workers_after_ms=200)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        taken: list[headgate.Claim] = []
        while not taken and time.monotonic() < deadline:
            taken = api.store.admit("python-worker", ["age"], 1)
            time.sleep(0.05)
        gone = False
        while not gone and time.monotonic() < deadline:
            gone = api.post(f"/workers/{worker}/heartbeat", json={}).status_code == 404
            time.sleep(0.05)
    finally:
        runner.stop()
    [claimed] = taken
    assert claimed.job.id == job_id and claimed.job.crash_attempt == 1
    assert claimed.fence == job["fence"] + 1
    api.store.ack(claimed, headgate.Outcome.SUCCESS)
    assert gone
    r = api.post(f"/workers/{worker}/jobs/{job_id}/complete", json=lease(job))
    assert (r.status_code, r.json()) == (404, {"error": f"worker not found: {worker}"})
    assert api.get(f"/jobs/{job_id}").json()["state"] == "completed"


# -- worker tokens ------------------------------------------------------------------------

WORKER_TOKEN = "worker-token-0123456789"
BOUND_TOKEN = "bound-worker-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789"


def test_worker_token_scope(make_api: Any) -> None:
    api = make_api(settings=Settings(
        api_tokens=(ADMIN_TOKEN,), api_worker_tokens=(WORKER_TOKEN, BOUND_TOKEN),
        api_worker_queues=((BOUND_TOKEN, ("mail",)),)))
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    as_worker = {"Authorization": f"Bearer {WORKER_TOKEN}"}
    bound = {"Authorization": f"Bearer {BOUND_TOKEN}"}
    secret = api.post("/jobs", json={"kind": "k", "queue": "billing",
                                     "payload": b64(b"secret")}, headers=admin).json()["id"]
    # Operator routes and reads are refused with the error body, whatever the method.
    for method, path in (("GET", "/jobs"), ("GET", f"/jobs/{secret}?include_payload=true"),
                         ("GET", "/workers"), ("GET", "/queues"), ("POST", "/jobs"),
                         ("POST", f"/jobs/{secret}/cancel"), ("GET", "/cluster"),
                         ("GET", "/metrics"), ("PUT", "/rate-classes/x")):
        r = api.request(method, path, headers=as_worker, json={})
        assert (r.status_code, r.json()) == (403, {"error": "worker token"}), path
    assert api.store.get_job(secret).state is State.AVAILABLE  # type: ignore[union-attr]

    # The worker protocol works with it.
    r = api.post("/workers", json={"queues": ["billing"], "capacity": 1, "agent": "sh"},
                 headers=as_worker)
    assert r.status_code == 201
    worker = r.json()["worker_id"]
    [job] = api.post(f"/workers/{worker}/claim", json={}, headers=as_worker).json()["jobs"]
    assert base64.b64decode(job["payload"]) == b"secret"
    r = api.post(f"/workers/{worker}/jobs/{secret}/complete", json=lease(job), headers=as_worker)
    assert r.status_code == 204

    # A token bound to `mail` serves mail only: neither registering for another queue
    # nor driving a worker of another queue reads that queue's payloads.
    r = api.post("/workers", json={"queues": ["billing"], "capacity": 1}, headers=bound)
    assert (r.status_code, r.json()) == (403, {"error": "this token may not serve queue billing"})
    api.post("/jobs", json={"kind": "k", "queue": "billing", "payload": b64(b"s2")},
             headers=admin)
    r = api.post(f"/workers/{worker}/claim", json={}, headers=bound)
    assert r.status_code == 403
    assert api.store.counts("billing")["available"] == 1
    r = api.post("/workers", json={"queues": ["mail"], "capacity": 1}, headers=bound)
    assert r.status_code == 201
    # An admin token may use the protocol too; a read-only one may not (it only reads).
    assert api.post("/workers", json={"queues": ["x"], "capacity": 1},
                    headers=admin).status_code == 201


def test_tokens_file_worker_lines(tmp_path: Any) -> None:
    path = tmp_path / "tokens"
    path.write_text("admin-aaaaaaaaaaaa rw name=ops\n"
                    "wrk-bbbbbbbbbbbb worker name=node-fleet queues=mail,sms\n"
                    "wrk-cccccccccccc worker\n")
    parsed = read_tokens_file(str(path))
    assert parsed.full == ("admin-aaaaaaaaaaaa",)
    assert parsed.worker == ("wrk-bbbbbbbbbbbb", "wrk-cccccccccccc")
    assert dict(parsed.names) == {"admin-aaaaaaaaaaaa": "ops", "wrk-bbbbbbbbbbbb": "node-fleet"}
    assert dict(parsed.worker_queues) == {"wrk-bbbbbbbbbbbb": ("mail", "sms")}
    settings = Settings.from_env({"HG_API_TOKENS_FILE": str(path),
                                  "HG_API_WORKER_TOKENS": "env-worker-dddddddd"})
    assert settings.api_worker_tokens == ("env-worker-dddddddd", "wrk-bbbbbbbbbbbb",
                                          "wrk-cccccccccccc")
    # Worker tokens alone authenticate requests: a remote bind is allowed, and the
    # loopback-only Host check is off.
    from headgate.web.guards import loopback_only

    only_workers = Settings(api_worker_tokens=("wrk-only-ffffffff",))
    assert only_workers.remote_bind_refusal("0.0.0.0:8080") is None
    assert not loopback_only(only_workers)
    assert Settings().remote_bind_refusal("0.0.0.0:8080") is not None
    path.write_text("tok-eeeeeeeeeeee rw queues=mail\n")
    with pytest.raises(headgate.services.config.ConfigError, match="line 1: queues= is for worker"):
        read_tokens_file(str(path))


# -- the console ----------------------------------------------------------------------

def test_the_console_shows_http_workers_and_names_them_on_job_pages(api: Api) -> None:
    job_id = api.enqueue("k", queue="console")
    worker = register(api, ["console"], capacity=3, kinds=["k"])
    claim(api, worker)
    api.store.heartbeat(WorkerBeat("python-1", host="box", pid=7, queues=("console",),
                                   concurrency=2))
    page = api.get(api.base + "/workers").text
    row = page[page.index(f'<th scope="row" class="mono">{worker}'):]
    row = row[:row.index("</tr>")]
    assert "test-agent/1" in row and ">HTTP<" in row and "kinds k" in row
    python_row = page[page.index('<th scope="row" class="mono">python-1'):]
    assert ">HTTP<" not in python_row[:python_row.index("</tr>")]
    sheet = api.get(api.base + f"/jobs/{job_id}").text
    assert worker in sheet and "over HTTP: test-agent/1" in sheet
    cluster = api.get(api.base + "/cluster").text
    assert "live workers (1 over HTTP)" in cluster


def test_a_worker_token_cannot_sign_in_to_the_console(make_api: Any) -> None:
    import re

    api = make_api(settings=Settings(api_tokens=(ADMIN_TOKEN,),
                                     api_worker_tokens=(WORKER_TOKEN,)))
    page = api.get(api.base + "/signin").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    r = api.session.post(api.base + "/signin", data={"token": WORKER_TOKEN, "csrf": csrf},
                         allow_redirects=False, timeout=10)
    assert r.status_code == 401 and "not accepted" in r.text
    r = api.session.post(api.base + "/signin", data={"token": ADMIN_TOKEN, "csrf": csrf},
                         allow_redirects=False, timeout=10)
    assert r.status_code == 302
