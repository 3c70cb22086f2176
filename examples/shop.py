"""An example worker app: the back office of a small web shop.

Run it (from the repository root, after `examples/enqueue_demo.py` put jobs in):

    headgate worker --app examples.shop:make_worker --store sqlite:///shop.db

Four kinds, each showing one part of the worker API:

- ``report.generate`` (queue ``reports``) — long-running: reports progress, writes
  partial output while it runs, stops early when cancelled, records a result; its
  payload has two schema versions and old ones are upcast by the decoder.
- ``email.send`` (queue ``email``, rate class ``smtp``) — rate-limited: the store admits
  at most what the ``smtp`` token bucket allows fleet-wide; when the mail server still
  says "slow down" the handler returns ``RateLimited`` and the whole fleet backs off.
  Hard bounces are skipped (archived), never retried.
- ``payment.capture`` (queue ``payments``) — sometimes fails: the fake gateway times
  out now and then (an exception → retry with backoff, the error and log lines land in
  the attempt history); declined cards are skipped; orders cancelled meanwhile are
  revoked (the job is deleted).
- ``thumbnail.render`` (queue ``default``) — isolated: runs in a child process, so a
  crash in native image code costs one attempt, not the worker.

Everything external is simulated; the point is the shape of real handlers.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from headgate import (
    Job,
    JsonDecoder,
    RateLimited,
    Revoke,
    Skip,
    Store,
    Worker,
)
from headgate.worker import JobContext

QUEUES = ["reports", "email", "payments", "default"]


# -- report.generate -----------------------------------------------------------------

def _report_v1_to_v2(v1: dict[str, Any]) -> dict[str, Any]:
    """Version 1 named a month; version 2 names an explicit period and row count."""
    return {"account_id": v1["account"], "period": {"month": v1["month"]},
            "rows": v1.get("rows", 2_000)}


def generate_report(job: Job, ctx: JobContext) -> None:
    spec = ctx.payload  # always version 2 here, whatever the producer sent
    rows = int(spec.get("rows", 2_000))
    chunk = 250
    totals = {"orders": 0, "revenue_cents": 0}
    for done in range(0, rows, chunk):
        # The "query": cancellable, so an operator cancel or shutdown stops it promptly.
        if ctx.cancelled.wait(0.05):
            ctx.logger.info("report for %s stopped at row %d: %s", spec["account_id"], done,
                            ctx.cancel_reason)
            return None
        batch = min(chunk, rows - done)
        totals["orders"] += batch
        totals["revenue_cents"] += batch * random.randint(500, 5_000)
        ctx.progress(done + batch, rows, f"aggregated {done + batch} of {rows} orders")
        ctx.output(json.dumps({"partial": totals}).encode())
    ctx.set_result(json.dumps({"account_id": spec["account_id"], "period": spec["period"],
                               **totals}).encode())
    return None


# -- email.send --------------------------------------------------------------------------

def send_email(job: Job, ctx: JobContext) -> RateLimited | Skip | None:
    message = ctx.payload
    to = message["to"]
    if to.endswith("@bounce.invalid"):
        return Skip(f"hard bounce: {to} does not exist")
    if random.random() < 0.1:
        # SMTP 421: the provider wants us to slow down. With a rate class on the job,
        # the store drains the class's bucket for this long: every worker backs off.
        ctx.logger.warning("421 from smtp relay for %s", to)
        return RateLimited(delay_ms=2_000)
    ctx.cancelled.wait(0.02)  # the SMTP conversation
    ctx.logger.info("sent %r to %s", message.get("subject", ""), to)
    return None


# -- payment.capture ---------------------------------------------------------------------

class GatewayTimeout(Exception):
    pass


def capture_payment(job: Job, ctx: JobContext) -> Skip | None:
    payment = ctx.payload
    if payment.get("order_cancelled"):
        raise Revoke("order was cancelled before capture")
    if payment["card"].endswith("0002"):
        return Skip("card declined")
    ctx.logger.info("capturing %d cents for order %s (attempt %d)", payment["amount_cents"],
                    payment["order_id"], job.attempt + 1)
    if random.random() < 0.25:
        raise GatewayTimeout("payment gateway did not answer within 10 s")
    ctx.set_result(json.dumps({"capture_id": f"cap_{job.id[-8:]}"}).encode())
    return None


# -- thumbnail.render (isolated) ---------------------------------------------------------

def render_thumbnail(job: Job, ctx: JobContext) -> bytes:
    """CPU-bound "native" work in a child process; returns the result bytes."""
    image = ctx.payload
    digest = hashlib.sha256()
    for i in range(int(image.get("pixels", 200_000)) // 1_000):
        digest.update(i.to_bytes(4, "little"))
        if i % 50 == 0 and ctx.cancelled.is_set():
            return b""
    ctx.progress(1, 1, "rendered")
    return json.dumps({"sku": image["sku"], "thumbnail": digest.hexdigest()[:16]}).encode()


def make_worker(store: Store) -> Worker:
    """The ``--app`` factory: the CLI passes the store named by --store / HG_*."""
    worker = Worker(store, queues=QUEUES, concurrency=8)
    json_payload = JsonDecoder()
    worker.register("report.generate", generate_report, timeout_ms=120_000,
                    decoder=JsonDecoder(current=2, upcasters={1: _report_v1_to_v2}))
    worker.register("email.send", send_email, decoder=json_payload, timeout_ms=30_000,
                    aliases=("mail.send",))
    worker.register("payment.capture", capture_payment, decoder=json_payload,
                    timeout_ms=15_000)
    worker.register("thumbnail.render", render_thumbnail, decoder=json_payload,
                    isolated=True, timeout_ms=60_000)
    return worker
