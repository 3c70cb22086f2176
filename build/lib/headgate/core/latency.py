"""The job latency histograms' fixed buckets, shared by the store that fills them
(triggers on `jobs`: SQLite's read the table `latency_bounds`, PostgreSQL's call
`headgate_latency_bound`, both written by `headgate migrate` from LATENCY_BOUNDS_MS, see
core/schema_constants.py) and the `/metrics` export."""

from __future__ import annotations

# Upper bounds in ms; a row's le_ms of INF is the +Inf bucket.
LATENCY_BOUNDS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
                     300000, 900000, 3600000)
INF = -1
# wait: available -> running; run: running -> terminal.
METRICS = ("wait", "run")
