"""`headgate demo`: a realistic data set, live workers, and the console — the fastest way
to see every page with something on it.

`seed()` is also what the console's tests and browser tests start from, so what a new
user sees in the demo is what the tests check. Everything is made the real way, through
the store's public methods: archived jobs really failed their attempts, the quarantined
fingerprint really lost its lease three times, running jobs are really leased.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import headgate
from headgate.core import Outcome, State

log = logging.getLogger("headgate.demo")

TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
CRASHER_KIND = "pdf.render"
CRASHER_PAYLOAD = b'{"document": "scan-0042.pdf", "pages": 9000}'
SEED_WORKER = "seed-worker"
# What each kind's failures look like: a charge_card job fails at the card processor,
# never with an SMTP error (the failures view shows these, so they must fit their jobs).
ARCHIVE_ERRORS: dict[str, tuple[str, ...]] = {
    "send_email": (
        "ConnectionRefusedError: [Errno 111] Connection refused (smtp.mail.example:25)",
        "SMTPRecipientsRefused: 550 5.1.1 <user@acme.example>: mailbox unavailable",
    ),
    "deliver_webhook": (
        "TimeoutError: webhook https://hooks.example/orders did not answer within 10 s",
        "HTTPError: 502 Bad Gateway from https://hooks.example/orders",
    ),
    "charge_card": (
        "CardDeclined: card ending 4242 declined (insufficient_funds)",
        "ValueError: invoice 7731 has no line items",
    ),
}


@dataclass
class Seeded:
    """Ids of notable seeded jobs, for tests and for the demo's welcome text."""

    archived: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    rate_limited: list[str] = field(default_factory=list)
    scheduled: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    quarantined_fingerprint: str = ""
    quarantined_job: str = ""
    schedules: list[str] = field(default_factory=list)


def _json(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _admit_one(store: Any, queue: str, worker: str, lease_ms: int) -> Any:
    claims = store.admit(worker, [queue], capacity=1, lease_ms=lease_ms)
    return claims[0] if claims else None


def _quarantine(store: Any, client: Any) -> tuple[str, str]:
    """A crash loop, for real: a job whose lease expires three times, the crash limit."""
    queue = "documents"
    job_id = client.enqueue(CRASHER_KIND, CRASHER_PAYLOAD, queue=queue, partition_key="initech",
                            tags=["ocr"])
    for _ in range(store.crash_limit):
        claim = None
        for _ in range(50):
            claim = _admit_one(store, queue, "crashy-worker", lease_ms=20)
            if claim and claim.job.id == job_id:
                break
            if claim:  # another documents job: give it back untouched
                store.release([claim])
            time.sleep(0.01)
        if claim is None:
            break
        while store.now_ms() <= claim.lease_expires_at_ms:
            time.sleep(0.005)
        store.reclaim_expired()
        job = store.get_job(job_id)
        if job is None or job.state is State.QUARANTINED:
            break
        store.reschedule_job(job_id, 0)  # skip the crash backoff for the next round
    return headgate.fingerprint(CRASHER_KIND, CRASHER_PAYLOAD), job_id


def seed(store: Any, *, rng: random.Random | None = None, running_lease_ms: int = 600_000,
         schedules: bool = True) -> Seeded:
    """Fill `store` with a small, believable fleet's worth of state (~300 jobs)."""
    rng = rng or random.Random(7)
    client = headgate.Client(store)
    out = Seeded()

    # Policy first, so admission below honours it.
    store.upsert_rate_class("smtp", 5, 1000, 5)
    store.upsert_rate_class("webhooks", 20, 1000, 40)
    store.upsert_rate_class("sms", 2, 60_000, 2, paused=True)
    store.upsert_concurrency_limit("reports-per-tenant", "reports", 2, "queue")

    # Archived failures with errors and logs: attempts really failed.
    for i in range(6):
        queue = ("emails", "webhooks", "billing")[i % 3]
        kind = {"emails": "send_email", "webhooks": "deliver_webhook",
                "billing": "charge_card"}[queue]
        tenant = TENANTS[i % len(TENANTS)]
        job_id = client.enqueue(kind, _json({"n": i, "tenant": tenant}), queue=queue,
                                partition_key=tenant, max_attempts=2, tags=["seed"])
        for attempt in range(2):
            claim = None
            for _ in range(100):
                claim = _admit_one(store, queue, SEED_WORKER, 60_000)
                if claim is None or claim.job.id == job_id:
                    break
                store.release([claim])
            if claim is None or claim.job.id != job_id:
                break
            errors = ARCHIVE_ERRORS[kind]
            store.ack(claim, Outcome.RETRY, error=errors[(i + attempt) % len(errors)],
                      logs=[f"attempt {attempt + 1}: connecting", "retrying after error"])
            if attempt == 0:
                store.reschedule_job(job_id, 0)
        out.archived.append(job_id)

    # Completed jobs with results.
    for i in range(12):
        tenant = TENANTS[i % len(TENANTS)]
        job_id = client.enqueue("deliver_webhook", _json({"order": 1000 + i}), queue="webhooks",
                                partition_key=tenant, rate_class="webhooks")
        claim = None
        for _ in range(20):
            claim = _admit_one(store, "webhooks", SEED_WORKER, 60_000)
            if claim is None or claim.job.id == job_id:
                break
            store.release([claim])
        if claim is not None and claim.job.id == job_id:
            store.ack(claim, Outcome.SUCCESS, result=_json({"status": 200, "ms": 40 + i}))
            out.completed.append(job_id)

    # Running jobs with progress and output: leased by a seed worker.
    for i, tenant in enumerate(("acme", "globex", "hooli")):
        job_id = client.enqueue("render_report", _json({"report": "monthly", "tenant": tenant}),
                                queue="reports", partition_key=tenant, tags=["monthly"])
        claim = None
        for _ in range(20):
            claim = _admit_one(store, "reports", SEED_WORKER, running_lease_ms)
            if claim is None or claim.job.id == job_id:
                break
            store.release([claim])
        if claim is not None and claim.job.id == job_id:
            store.report_progress(claim, 30 + 25 * i, 100, f"rendering page {30 + 25 * i}")
            store.write_output(claim, _json({"pages_done": 30 + 25 * i}))
            out.running.append(job_id)

    # The quarantined fingerprint.
    out.quarantined_fingerprint, out.quarantined_job = _quarantine(store, client)

    # Waiting work: a throttled email backlog across tenants (the rate class holds it),
    # report requests over the concurrency ceiling, webhooks, pending and scheduled jobs.
    now = store.now_ms()
    for i in range(60):
        tenant = TENANTS[i % len(TENANTS)] if i % 4 else "acme"
        out.rate_limited.append(client.enqueue(
            "send_email", _json({"to": f"user{i}@{tenant}.example", "template": "receipt"}),
            queue="emails", partition_key=tenant, rate_class="smtp",
            priority=5 if i % 10 == 0 else 0, tags=["receipt"] + (["vip"] if i % 7 == 0 else [])))
    for i in range(8):
        client.enqueue("render_report", _json({"report": "weekly", "n": i}), queue="reports",
                       partition_key=("acme", "globex")[i % 2], tags=["weekly"])
    for i in range(25):
        client.enqueue("deliver_webhook", _json({"order": 2000 + i}), queue="webhooks",
                       partition_key=TENANTS[i % len(TENANTS)], rate_class="webhooks")
    for i in range(5):
        out.scheduled.append(client.enqueue(
            "charge_card", _json({"invoice": 7700 + i}), queue="billing",
            partition_key=TENANTS[i], scheduled_at_ms=now + (i + 1) * 3_600_000))
    for i in range(3):
        out.pending.append(client.enqueue("import_csv", _json({"file": f"batch-{i}.csv"}),
                                          queue="ingest", pending=True))
    for i in range(4):
        client.enqueue("send_sms", _json({"to": f"+1555000{i:04d}"}), queue="notifications",
                       rate_class="sms", partition_key=TENANTS[i])
    store.set_queue_weight("emails", 3)
    store.set_queue_weight("webhooks", 2)
    store.set_enqueue_limit("billing", 500)

    if schedules:
        specs: tuple[dict[str, Any], ...] = (
            {"id": "nightly-report", "kind": "render_report", "spec": "0 3 * * *",
             "queue": "reports", "payload": _json({"report": "nightly"})},
            {"id": "heartbeat-ping", "kind": "deliver_webhook", "spec": "@every:60000",
             "queue": "webhooks", "payload": _json({"ping": True}), "on_missed": "skip"},
            {"id": "weekday-digest", "kind": "send_email",
             "spec": "CRON_TZ=Europe/Paris 0 8 * * 1-5", "queue": "emails",
             "payload": _json({"template": "digest"}), "on_missed": "run_once"},
        )
        for sched in specs:
            try:
                store.upsert_schedule(sched)
                out.schedules.append(sched["id"])
            except Exception as exc:  # noqa: BLE001 - a demo without schedules still works
                log.warning("could not create schedule %s: %s", sched["id"], exc)
    return out


# -- live workers for the demo --------------------------------------------------------------

def _handlers(rng: random.Random) -> dict[str, Callable[..., Any]]:
    def send_email(job: Any, ctx: Any) -> None:
        time.sleep(rng.uniform(0.1, 0.5))
        if rng.random() < 0.05:
            raise ConnectionError("SMTP server closed the connection unexpectedly")

    def deliver_webhook(job: Any, ctx: Any) -> None:
        time.sleep(rng.uniform(0.05, 0.3))
        if rng.random() < 0.08:
            raise TimeoutError("webhook endpoint did not answer within 10 s")
        ctx.set_result(_json({"status": 200}))

    def render_report(job: Any, ctx: Any) -> None:
        steps = 20
        for step in range(1, steps + 1):
            if ctx.cancelled.is_set():
                return
            time.sleep(0.4)
            ctx.progress(step, steps, f"rendering page {step * 5}")
        ctx.set_result(_json({"pages": steps * 5, "url": "https://files.example/report.pdf"}))

    def charge_card(job: Any, ctx: Any) -> None:
        time.sleep(0.2)

    def import_csv(job: Any, ctx: Any) -> None:
        for step in range(1, 11):
            time.sleep(0.2)
            ctx.progress(step, 10, f"{step * 1000} rows")

    def send_sms(job: Any, ctx: Any) -> None:
        time.sleep(0.1)

    return {"send_email": send_email, "deliver_webhook": deliver_webhook,
            "render_report": render_report, "charge_card": charge_card,
            "import_csv": import_csv, "send_sms": send_sms}


class DemoFleet:
    """Two in-process workers and a producer trickling new jobs, until `stop()`."""

    def __init__(self, store: Any, rng: random.Random | None = None) -> None:
        self.store = store
        self.rng = rng or random.Random()
        self.workers: list[Any] = []
        self._stop = threading.Event()
        self._producer: threading.Thread | None = None

    def start(self) -> DemoFleet:
        worker_cls = getattr(headgate, "Worker", None)
        if worker_cls is not None:
            plan = (("demo-mail", ["emails", "webhooks", "notifications"], 6),
                    ("demo-batch", ["reports", "billing", "ingest", "documents"], 4))
            for name, queues, concurrency in plan:
                w = worker_cls(self.store, queues=queues, concurrency=concurrency,
                               worker_id=name, duties=False)
                for kind, fn in _handlers(self.rng).items():
                    w.register(kind, fn)
                w.start()
                self.workers.append(w)
        else:
            log.warning("headgate.Worker is not available: the demo runs without workers")
        self._producer = threading.Thread(target=self._produce, name="demo-producer",
                                          daemon=True)
        self._producer.start()
        return self

    def _produce(self) -> None:
        client = headgate.Client(self.store)
        while not self._stop.wait(self.rng.uniform(0.3, 1.2)):
            try:
                if self.store.counts().get("available", 0) > 400:
                    continue  # keep the demo bounded
                tenant = self.rng.choice(TENANTS)
                pick = self.rng.random()
                if pick < 0.5:
                    client.enqueue("send_email", _json({"to": f"someone@{tenant}.example"}),
                                   queue="emails", partition_key=tenant, rate_class="smtp",
                                   tags=["receipt"])
                elif pick < 0.85:
                    client.enqueue("deliver_webhook", _json({"order": self.rng.randint(1, 9999)}),
                                   queue="webhooks", partition_key=tenant,
                                   rate_class="webhooks")
                else:
                    client.enqueue("render_report", _json({"report": "adhoc"}),
                                   queue="reports", partition_key=tenant)
            except Exception as exc:  # noqa: BLE001 - backpressure etc.: try again later
                log.debug("demo producer: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        for w in self.workers:
            try:
                w.stop(drain_ms=2_000, timeout=5)
            except Exception:  # noqa: BLE001
                pass


# -- the `headgate demo` command's pieces -------------------------------------------------

def prepare(path: str, *, fresh: bool = False) -> tuple[bool, Seeded | None]:
    """Create (or reuse) the demo database; seed it when it has no queues yet.
    Returns (seeded_now, ids)."""
    import os

    if fresh:
        for suffix in ("", "-wal", "-shm"):
            try:
                os.remove(path + suffix)
            except FileNotFoundError:
                pass
    store = headgate.open_store(f"sqlite:///{path}")
    try:
        if store.queue_stats():
            return False, None
        return True, seed(store, running_lease_ms=120_000)
    finally:
        store.close()


def spawn_fleet(path: str) -> Any:
    """The demo's workers and producer in their own process — as a real fleet runs —
    so no thread crosses the server's fork. Ended with terminate()."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "headgate.dashboard.demo", "fleet", path])


def _fleet_main(path: str) -> None:
    import signal

    logging.basicConfig(level=logging.WARNING, format="demo-fleet: %(message)s")
    store = headgate.open_store(f"sqlite:///{path}", migrate=False)
    fleet = DemoFleet(store).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    fleet.stop()
    store.close()


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "fleet":
        _fleet_main(sys.argv[2])
    else:
        sys.exit("usage: python -m headgate.dashboard.demo fleet PATH")
