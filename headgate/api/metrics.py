"""Prometheus `/metrics` and the top-level `/readyz` (docs/api.md, Metrics).

Every figure comes from what the store maintains anyway — the per-queue counters and
the per-minute history buckets — never from scanning jobs, so a scrape costs the same
with a million jobs as with ten:
- `headgate_jobs{queue,state}`: queue depth by state (counters).
- `headgate_jobs_arrived_total`, `headgate_jobs_completed_total`,
  `headgate_jobs_failed_total{queue}` and
  `headgate_admission_rejections_total{queue,policy}`: sums of the history buckets
  since the start of the minute in which this process started (history buckets are
  per minute, so jobs from that minute before start-up count too). Buckets older
  than two minutes are final and folded into a running total, so each scrape reads
  only the last few buckets. (The history has no admissions column, so admissions are
  not exported; rejections are, by policy: per bucket the most jobs one admission pass
  held back, so their sum counts job-minutes, not polls.)
- `headgate_job_wait_seconds{queue}` (available -> running) and
  `headgate_job_run_seconds{queue}` (running -> terminal): histograms with fixed
  buckets (5 ms .. 1 h) from the store's own per-minute latency buckets, written at
  admit and ack time by every process, so each server exports the fleet's figures.
- `headgate_http_request_duration_seconds{method,endpoint,status}`: request latency.
- `headgate_store_oldest_transaction_seconds`, `headgate_store_wal_bytes` (SQLite) and
  `headgate_store_xmin_age_transactions` (PostgreSQL): what a long-held snapshot does
  to the store (`Store.transaction_horizon`; docs/RELIABILITY.md, Held snapshots). The
  one read that is not a maintained figure: a stat of the WAL file, or one query of
  pg_stat_activity.
A registry per app, so several apps in one process (tests, embedding) do not collide.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import flask
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from headgate.core import HeadgateError
from headgate.core.latency import INF as LATENCY_INF
from headgate.core.latency import LATENCY_BOUNDS_MS
from headgate.core.latency import METRICS as LATENCY_METRICS
from headgate.core.records import HistoryBucket, TransactionHorizon
from headgate.core.schema_constants import HISTORY_BUCKET_MS
from headgate.store.port import Store

from .auth import authenticate
from .context import api_state
from .errors import ApiError, handle_unexpected, store_error

ops_bp = flask.Blueprint("ops", __name__)


@ops_bp.errorhandler(ApiError)
def _api_error(exc: ApiError) -> flask.Response:
    return exc.response()


@ops_bp.errorhandler(HeadgateError)
def _store_error(exc: HeadgateError) -> flask.Response:
    return store_error(exc).response()


ops_bp.register_error_handler(Exception, handle_unexpected)

# Where the app keeps its Metrics (app.extensions), beside the API's state.
METRICS_KEY = "headgate.api.metrics"
MINUTE_MS = HISTORY_BUCKET_MS  # the store's history buckets
SETTLE_MS = 2 * MINUTE_MS
POLICIES = ("rate_class", "concurrency_limit", "quarantine")
OUTCOMES = ("arrived", "completed", "failed")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class HistoryTotals:
    """Monotonic per-queue totals from the history buckets since `start_ms`."""

    def __init__(self, start_ms: int) -> None:
        self.through = start_ms - start_ms % MINUTE_MS
        self.settled: dict[tuple[str, str], int] = defaultdict(int)
        self._lock = threading.Lock()

    def read(self, store: Store, queues: list[str]) -> dict[tuple[str, str], int]:
        with self._lock:
            now = store.now_ms()
            settle = now - now % MINUTE_MS - SETTLE_MS
            totals: dict[tuple[str, str], int] = defaultdict(int, self.settled)
            for queue in queues:
                for bucket in store.history(queue, self.through, MINUTE_MS):
                    for key, value in _counters(bucket).items():
                        totals[(queue, key)] += value
                        if bucket.at_ms < settle:
                            self.settled[(queue, key)] += value
            self.through = max(self.through, settle)
            return totals


def _counters(bucket: HistoryBucket) -> dict[str, int]:
    """A bucket's counters by the names the totals keep (OUTCOMES, rejected_<policy>)."""
    r = bucket.admission_rejections
    return {"arrived": bucket.arrived, "completed": bucket.completed, "failed": bucket.failed,
            "rejected_rate_class": r.rate_class,
            "rejected_concurrency_limit": r.concurrency_limit,
            "rejected_quarantine": r.quarantine}


class LatencyTotals:
    """Per-queue job latency histograms (the store's `queue_latency` minute buckets)
    since `start_ms`, settled buckets folded into running totals as HistoryTotals does:
    {(queue, metric): {le_ms: (count, sum_ms)}}."""

    def __init__(self, start_ms: int) -> None:
        self.through = start_ms - start_ms % MINUTE_MS
        self.settled: dict[tuple[str, str], dict[int, list[int]]] = defaultdict(dict)
        self._lock = threading.Lock()

    def read(self, store: Store) -> dict[tuple[str, str], dict[int, list[int]]]:
        with self._lock:
            now = store.now_ms()
            settle = now - now % MINUTE_MS - SETTLE_MS
            totals: dict[tuple[str, str], dict[int, list[int]]] = defaultdict(dict)
            for key, buckets in self.settled.items():
                totals[key] = {le: list(v) for le, v in buckets.items()}
            for queue, at, metric, le, n, sum_ms in store.latency_histograms(self.through):
                for target in (totals, self.settled) if at < settle else (totals,):
                    cell = target[(queue, metric)].setdefault(le, [0, 0])
                    cell[0] += n
                    cell[1] += sum_ms
            self.through = max(self.through, settle)
            return totals


def latency_families(totals: dict[tuple[str, str], dict[int, list[int]]]) -> Iterator[Metric]:
    """headgate_job_wait_seconds / headgate_job_run_seconds{queue}, cumulative buckets."""
    helps = {
        "wait": "Job wait, available -> running, by queue (the store's histograms, since "
                "the start of the minute this process started in).",
        "run": "Job run time, running -> terminal, by queue (the store's histograms, since "
               "the start of the minute this process started in).",
    }
    for metric in LATENCY_METRICS:
        family = HistogramMetricFamily(f"headgate_job_{metric}_seconds", helps[metric],
                                       labels=["queue"])
        for (queue, name), buckets in sorted(totals.items()):
            if name != metric:
                continue
            cumulative, total_ms = 0, 0
            points: list[tuple[str, float]] = []
            for bound in LATENCY_BOUNDS_MS:
                n, s = buckets.get(bound, (0, 0))
                cumulative += n
                total_ms += s
                points.append((repr(bound / 1000), cumulative))
            n, s = buckets.get(LATENCY_INF, (0, 0))
            points.append(("+Inf", cumulative + n))
            family.add_metric([queue], points, sum_value=(total_ms + s) / 1000)
        yield family


class StoreCollector(Collector):
    def __init__(self, get_store: Callable[[], Store], totals: HistoryTotals,
                 latency: LatencyTotals | None = None) -> None:
        self.get_store = get_store
        self.totals = totals
        self.latency = latency

    def collect(self) -> Iterator[Metric]:
        store = self.get_store()
        stats = store.queue_stats()
        depth = GaugeMetricFamily("headgate_jobs", "Jobs by queue and state (maintained "
                                  "counters).", labels=["queue", "state"])
        paused = GaugeMetricFamily("headgate_queue_paused", "1 when the queue is paused.",
                                   labels=["queue"])
        oldest = GaugeMetricFamily("headgate_queue_oldest_available_seconds",
                                   "Age of the oldest available job.", labels=["queue"])
        for q in stats:
            for state, n in q.by_state.items():
                depth.add_metric([q.queue, state], n)
            paused.add_metric([q.queue], 1 if q.paused else 0)
            if q.oldest_available_ms is not None:
                oldest.add_metric([q.queue], q.oldest_available_ms / 1000)
        yield depth
        yield paused
        yield oldest
        totals = self.totals.read(store, [q.queue for q in stats])
        for outcome in OUTCOMES:
            family = CounterMetricFamily(
                f"headgate_jobs_{outcome}", f"Jobs {outcome} (history buckets since the "
                "start of the minute this process started in).", labels=["queue"])
            for q in stats:
                family.add_metric([q.queue], totals.get((q.queue, outcome), 0))
            yield family
        rejections = CounterMetricFamily(
            "headgate_admission_rejections", "Jobs admission held back, by policy: per "
            "history bucket the most one admission pass turned away (job-minutes), summed "
            "since the start of the minute this process started in.",
            labels=["queue", "policy"])
        for q in stats:
            for policy in POLICIES:
                rejections.add_metric([q.queue, policy],
                                      totals.get((q.queue, f"rejected_{policy}"), 0))
        yield rejections
        if self.latency is not None:
            yield from latency_families(self.latency.read(store))
        yield from horizon_families(store.transaction_horizon())


def horizon_families(h: TransactionHorizon) -> Iterator[Metric]:
    """The transaction-horizon gauges; an engine that cannot know a figure omits it."""
    seen = ("this process's store connections" if h.transactions_seen == "process"
            else "client sessions on this database, idle ones excluded")
    oldest = GaugeMetricFamily(
        "headgate_store_oldest_transaction_seconds",
        f"Age of the oldest open transaction of {seen}; 0 when none is open.")
    oldest.add_metric([], (h.oldest_transaction_ms or 0) / 1000)
    yield oldest
    if h.wal_bytes is not None:
        wal = GaugeMetricFamily(
            "headgate_store_wal_bytes", "Size of the SQLite WAL file on disk; past "
            f"{h.wal_limit_bytes} bytes it is truncated once no reader holds it.")
        wal.add_metric([], h.wal_bytes)
        yield wal
    if h.engine == "postgres":
        xmin = GaugeMetricFamily(
            "headgate_store_xmin_age_transactions", "Transactions since the oldest "
            "snapshot a session on this database holds (age(backend_xmin)); 0 when none.")
        xmin.add_metric([], h.xmin_age or 0)
        yield xmin


class Metrics:
    def __init__(self, get_store: Callable[[], Store], start_ms: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.latency = Histogram(
            "headgate_http_request_duration_seconds", "HTTP request latency.",
            ["method", "endpoint", "status"], registry=self.registry, buckets=LATENCY_BUCKETS,
        )
        self.registry.register(StoreCollector(get_store, HistoryTotals(start_ms),
                                              LatencyTotals(start_ms)))

    def before_request(self) -> None:
        flask.g.headgate_started = time.perf_counter()

    def after_request(self, response: flask.Response) -> flask.Response:
        started = flask.g.pop("headgate_started", None)
        if started is not None:
            self.observe(flask.request.method, flask.request.endpoint or "unmatched",
                         response.status_code, started)
        return response

    def observe(self, method: str, endpoint: str, status: int, started: float) -> None:
        """A request's latency, from `started` (time.perf_counter) to now."""
        self.latency.labels(method, endpoint, str(status)).observe(
            time.perf_counter() - started)


@ops_bp.get("/metrics")
def metrics() -> Any:
    # An exposed server does not publish its queue names, not even to a worker's host.
    if authenticate(api_state().tokens).worker:
        raise ApiError(403, "worker token")
    metrics: Metrics = flask.current_app.extensions[METRICS_KEY]
    body = generate_latest(metrics.registry)
    # content_type, not mimetype: Flask appends a charset to a mimetype, and this one
    # already names it. The header is the one the library's own exposition sends.
    return flask.Response(body, content_type=CONTENT_TYPE_LATEST)


@ops_bp.get("/readyz")
def readyz() -> Any:
    from .system import ready_response

    return ready_response()
