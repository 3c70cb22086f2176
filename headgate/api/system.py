"""Health, readiness, meta, system info and prune: what an operator asks of a server."""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from typing import Any

import flask

from headgate.core import UNFINISHED
from headgate.store.port import StoreBasics

from .blueprint import bp, json_response
from .context import api_state, caller, store
from .params import dflt, json_body, req

MAX_PAGE_SIZE = 200
APPROXIMATE_COUNT_THRESHOLD = 50_000


@bp.get("/healthz")
def healthz() -> flask.Response:
    """Liveness: never touches the store (a database outage is not a reason to be
    restarted), needs no credentials."""
    return flask.Response("ok", mimetype="text/plain")


def ready_response() -> flask.Response:
    """Readiness: the cheapest store round trip — one index lookup, never a count.
    StoreUnavailable propagates to the 503 envelope."""
    store().ping()
    return flask.Response("ready", mimetype="text/plain")


@bp.get("/readyz")
def readyz() -> flask.Response:
    return ready_response()


@bp.get("/meta")
def meta() -> flask.Response:
    """What a client (the dashboard) adapts to. `read_only` is additive: true when the
    server is in read-only mode or the caller holds a read-only token, so a UI can
    disable its buttons — the server enforces it regardless."""
    state = api_state()
    return json_response({
        "version": state.version,
        "backend": store().backend,
        "capabilities": list(store().capabilities().names),
        "limits": {
            "max_page_size": MAX_PAGE_SIZE,
            "approximate_count_threshold": APPROXIMATE_COUNT_THRESHOLD,
        },
        "read_only": state.read_only or caller().read_only,
    })


def storage_info(s: StoreBasics) -> dict[str, Any]:
    """Storage usage where it is cheap to know: the SQLite file (+ WAL) sizes."""
    if s.backend != "sqlite":
        return {"engine": s.backend, "path": None, "size_bytes": None}
    url = s.store_url()
    path = url.removeprefix("sqlite:///") if url else None
    size = None
    if path and path != ":memory:":
        size = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                size += os.path.getsize(path + suffix)
            except OSError:
                continue
    return {"engine": "sqlite", "path": path, "size_bytes": size}


@bp.get("/system/storage")
def system_storage() -> flask.Response:
    """The storage figures of /system/info plus what the retention duty keeps in check:
    unique keys (kept, past their window, the orphan sweep's totals), the history and
    latency buckets (kept, older than the horizon, the oldest), and the transaction
    horizon that holds cleanup back (the gauges /metrics exports)."""
    s = store()
    horizon = api_state().settings.history_retention_ms
    buckets = {table: dataclasses.asdict(b)
               for table, b in s.history_bucket_counts(horizon).items()}
    return json_response({
        **storage_info(s), "uniques": dataclasses.asdict(s.unique_key_counts()),
        "buckets": {"retention_ms": horizon, **buckets},
        "horizon": dataclasses.asdict(s.transaction_horizon()),
    })


@bp.get("/system/info")
def system_info() -> flask.Response:
    """Version, backend, uptime and job counts (from the maintained counters)."""
    state = api_state()
    s = store()
    counts = s.counts()
    unfinished = {u.value for u in UNFINISHED}
    return json_response({
        "version": state.version,
        "backend": s.backend,
        "schema_version": s.schema_version(),
        "os": platform.system().lower(),
        "arch": platform.machine(),
        "python_version": platform.python_version(),
        "pid": os.getpid(),
        "started_at_ms": int(state.started_at * 1000),
        "uptime_secs": int(time.monotonic() - state.started_monotonic),
        "read_only": state.read_only,
        "storage": storage_info(s),
        "jobs": {
            "total": sum(counts.values()),
            "active": sum(n for k, n in counts.items() if k in unfinished),
            "by_state": counts,
        },
    })


@bp.post("/system/prune")
def system_prune() -> flask.Response:
    """Delete terminal (never quarantined) jobs finalized more than `older_than_ms`
    ago; `dry_run: true` only counts them by state."""
    b = json_body(req("older_than_ms", "i64"), dflt("dry_run", "bool", False))
    return json_response(dataclasses.asdict(store().prune(b["older_than_ms"], b["dry_run"])))
