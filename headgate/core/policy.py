"""The policy vocabularies: the values an operator may name for a policy knob.

Written once here so the API's 400s and the store's InvalidInput accept exactly the
same words, and neither layer has to ask the other.
"""

from __future__ import annotations

# What a concurrency limit does with a job that finds it full (docs/ARCHITECTURE.md).
SATURATION_STRATEGIES = ("queue", "discard", "cancel_incoming", "cancel_running")

# What a periodic schedule does with ticks that came while nobody fired it;
# headgate.services.scheduling decides what each means.
ON_MISSED = ("skip", "run_once", "backfill")

# How long a schedule's run-now key returns its first job: longer than the API's 24 h
# idempotency window, so a client retrying through it still meets the same job.
RUN_NOW_REPLAY_MS = 48 * 3_600_000

# Operator signals a worker takes on its next heartbeat.
WORKER_SIGNALS = ("quiet", "resume", "restart", "terminate", "resign")
