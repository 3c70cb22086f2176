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

# Operator signals a worker takes on its next heartbeat.
WORKER_SIGNALS = ("quiet", "resume", "restart", "terminate", "resign")
