"""Expected starts and what-if simulations: the store's numbers gathered into the
snapshot core/forecast.py computes from (docs/forecast.md).

A service over the port's reads. `Forecaster(store)` reads what every prediction of
one moment shares once (queues, rate classes, ceilings, live workers, run times,
completion rates); a queue's partitions are read on first use. So the job list's page
costs one gather and one `forecast_inputs` read for its waiting jobs, not one per job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from headgate.core import Explanation, Job, State, drain
from headgate.core.forecast import (
    FLOOR_MS,
    Change,
    Place,
    Prediction,
    QueueInput,
    RateInput,
    RunTime,
    Snapshot,
    WorkerInput,
    apply,
    drain_ms,
    predict,
)
from headgate.core.latency import summaries
from headgate.core.records import ConcurrencyLimit
from headgate.store.port import Store

# A worker whose last heartbeat is older than this is not counted as serving (a running
# worker beats every 2 s by default; this is a lease's length).
LIVE_WORKER_MS = 30_000
# Run times are read from the last hour's latency histograms.
RUN_WINDOW_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Simulated:
    """The answer of a what-if: per affected queue, before and after."""

    queues: list[dict[str, Any]]
    before: Prediction
    after: Prediction


class Forecaster:
    """One moment's shared inputs, read once; predictions for any number of jobs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.now = store.now_ms()
        self._stats = {q.queue: q for q in store.queue_stats()}
        counters = store.history_counters(self.now - drain.WINDOW_MS - drain.BUCKET_MS)
        self._drain = {q: drain.smoothed_rates(b, self.now).drain for q, b in counters.items()}
        self._classes = {rc.name: rc for rc in store.rate_classes()}
        self._ceilings: dict[str, int] = {}
        self._limits: dict[str, ConcurrencyLimit] = {}
        for lim in store.concurrency_limits():
            self._limits[lim.name] = lim
            q, m = lim.queue, lim.max_concurrent
            self._ceilings[q] = min(m, self._ceilings.get(q, m))
        self._workers = [
            WorkerInput(w.queues, w.concurrency, w.inflight)
            for w in store.list_workers(LIVE_WORKER_MS) if w.status == "running"
        ]
        rows = store.latency_totals(self.now - RUN_WINDOW_MS)
        _, by_kind = summaries(rows, "kind")
        self._run_by_kind = {k["kind"]: RunTime.from_summary(k["run"]) for k in by_kind}
        _, by_queue = summaries(rows, "queue")
        self._run_by_queue = {q["queue"]: RunTime.from_summary(q["run"]) for q in by_queue}
        self._partitions: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
        self._quarantined: set[str] | None = None

    # -- the snapshot ------------------------------------------------------------------
    def rate_inputs(self) -> dict[str, RateInput]:
        return {name: RateInput(rc.limit_per_window, rc.window_ms, rc.burst,
                                rc.tokens_available, rc.paused)
                for name, rc in self._classes.items()}

    def queue_input(self, name: str) -> QueueInput:
        if name not in self._partitions:
            waiting: dict[str, int] = {}
            running: dict[str, int] = {}
            for p in self.store.partitions(name):
                waiting[p.partition_key] = p.waiting
                running[p.partition_key] = p.running
            self._partitions[name] = (waiting, running)
        waiting, running = self._partitions[name]
        stats = self._stats.get(name)
        return QueueInput(name, paused=stats is not None and stats.paused,
                          weight=stats.weight if stats is not None else 1, waiting=waiting,
                          running=running, ceiling=self._ceilings.get(name),
                          drain_per_s=self._drain.get(name, 0.0))

    def snapshot(self, queues: Iterable[str]) -> Snapshot:
        """The snapshot for predictions in `queues` and the queues their workers also
        serve (whose backlog shares the workers' slots)."""
        names = set(queues)
        for w in self._workers:
            if names.intersection(w.queues):
                names.update(q for q in w.queues if self._has_backlog(q))
        return Snapshot({n: self.queue_input(n) for n in sorted(names)}, self.rate_inputs(),
                        self._workers,
                        {n: rc.jobs_waiting for n, rc in self._classes.items()})

    def _has_backlog(self, queue: str) -> bool:
        stats = self._stats.get(queue)
        return stats is not None and stats.by_state.get("available", 0) > 0

    def run_time(self, queue: str, kind: str | None) -> RunTime | None:
        """The kind's run time in this queue, else the kind's anywhere, else the
        queue's (any kind)."""
        if kind:
            found = self._run_by_kind.get(kind)
            if found is not None:
                return found
        return self._run_by_queue.get(queue)

    def is_quarantined(self, fingerprint: str) -> bool:
        if self._quarantined is None:
            self._quarantined = {q.fingerprint for q in self.store.quarantine_list()}
        return fingerprint in self._quarantined

    # -- predictions -------------------------------------------------------------------
    def predict_jobs(self, jobs: Sequence[Job]) -> dict[str, Prediction]:
        """Each job's expected start: one read of places for the waiting ones."""
        waiting = [j for j in jobs if j.state is State.AVAILABLE]
        ahead = self.store.forecast_inputs([j.id for j in waiting], []).ahead if waiting else {}
        snap = self.snapshot({j.queue for j in waiting}) if waiting else None
        out: dict[str, Prediction] = {}
        for job in jobs:
            if job.state is not State.AVAILABLE or snap is None:
                out[job.id] = self._not_available(job)
                continue
            if job.id not in ahead:  # admitted or gone since the page was read
                out[job.id] = Prediction.unknown("not_waiting")
                continue
            out[job.id] = predict(snap, self.place(job, ahead[job.id]))
        return out

    def predict_job(self, job: Job, explanation: Explanation | None = None) -> Prediction:
        if explanation is not None and explanation.blocked_by == "quarantine":
            return Prediction.unknown("quarantined")
        return self.predict_jobs([job])[job.id]

    def place(self, job: Job, ahead: int) -> Place:
        return Place(job.queue, job.partition_key, ahead, job.rate_class, job.weight,
                     self.run_time(job.queue, job.kind), self.is_quarantined(job.fingerprint))

    def _not_available(self, job: Job) -> Prediction:
        if job.state in (State.SCHEDULED, State.RETRYABLE):
            due = max(0, job.scheduled_at_ms - self.now)
            return Prediction(due, due, due + FLOOR_MS, None, "schedule")
        if job.state is State.PENDING:
            return Prediction.unknown("pending")
        if job.state is State.QUARANTINED:
            return Prediction.unknown("quarantined")
        return Prediction.unknown("not_waiting")

    # -- what-if -----------------------------------------------------------------------
    def affected_queues(self, change: Change, rate_class_queues: Sequence[str]) -> list[str]:
        names: set[str] = set()
        if change.rate_class is not None:
            names.update(rate_class_queues)
        if change.concurrency_limit_queue is not None:
            names.add(change.concurrency_limit_queue)
        if change.queue is not None:
            names.add(change.queue)
            for w in self._workers:  # a weight moves slots between a worker's queues
                if change.queue in w.queues:
                    names.update(q for q in w.queues if self._has_backlog(q))
        names.update(change.slots_queues)
        return sorted(names)

    def backlog_queues(self) -> list[str]:
        return sorted(q for q in self._stats if self._has_backlog(q))

    def limit(self, name: str) -> ConcurrencyLimit | None:
        return self._limits.get(name)

    def ceiling_with(self, queue: str, name: str, max_concurrent: int) -> int:
        """The queue's tightest ceiling were limit `name` set to `max_concurrent`."""
        others = [lim.max_concurrent for lim in self._limits.values()
                  if lim.queue == queue and lim.name != name]
        return min([max_concurrent, *others])

    def simulate(self, change: Change) -> Simulated:
        """Before and after `change`, for the current backlog: each affected queue's time
        to drain and its oldest job's expected start, and the longest time to drain."""
        candidates = self.backlog_queues()
        inputs = self.store.forecast_inputs([], candidates)
        mix = inputs.classes
        using = [q for q in candidates if change.rate_class in mix.get(q, {})]
        queues = self.affected_queues(change, using)
        oldest = inputs.oldest
        jobs = {q: self.store.get_job(oldest[q]) for q in queues if q in oldest}
        ahead = self.store.forecast_inputs(
            [j.id for j in jobs.values() if j is not None], []).ahead
        before_snap = self.snapshot(queues)
        after_snap = apply(before_snap, change)
        rows = []
        drains: dict[str, list[Prediction]] = {"before": [], "after": []}
        for q in queues:
            classes = mix.get(q) or {}
            main_class = max(classes, key=lambda c: (classes[c], c)) if classes else ""
            run = self.run_time(q, None)
            job = jobs.get(q)
            row: dict[str, Any] = {
                "queue": q,
                "waiting": before_snap.queues[q].backlog if q in before_snap.queues else 0,
                "oldest_job_id": job.id if job is not None else None,
            }
            for label, snap in (("before", before_snap), ("after", after_snap)):
                ttd = drain_ms(snap, q, main_class, 1, run)
                drains[label].append(ttd)
                if job is not None and job.id in ahead:
                    start = predict(snap, self.place(job, ahead[job.id]))
                else:
                    start = Prediction.unknown("not_waiting")
                row[label] = {"time_to_drain": ttd.as_dict(), "oldest_start": start.as_dict()}
            rows.append(row)
        return Simulated(rows, _longest(drains["before"]), _longest(drains["after"]))


def _longest(drains: Sequence[Prediction]) -> Prediction:
    """The backlog drains when its slowest queue has: the largest known time; unknown
    when any queue's is (its reason), nothing when no queue is affected."""
    if not drains:
        return Prediction(0, 0, 0, None, "now")
    for d in drains:
        if d.ms is None:
            return d
    slowest = max(drains, key=lambda d: d.ms or 0)
    return replace(slowest)
