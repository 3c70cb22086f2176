"""When will a waiting job start, and what would a policy change do: a model of
admission over a snapshot of the store's numbers (docs/forecast.md).

Pure: the caller (headgate/services/forecasting.py) reads the snapshot, this module only
computes. The model is a fluid one. A queue admits at a rate set by what binds first:

- its workers' slots (the live workers that serve it, their concurrency shared between
  their queues by weight) over the measured run time of the job's kind;
- its rate class: `limit` tokens per `window_ms`, a job spending its weight, the class
  shared between the queues that wait on it in proportion to their backlog;
- without either (no run time measured yet, no class), the queue's measured completion
  rate.

What the store can admit at once (free slots, tokens in the bucket, room under the
ceiling) is admitted at time 0. After that the rate is shared between the queue's
partitions as deficit round robin shares it: equally, each partition capped by its
concurrency limit (`max_concurrent` running over the run time), and what a capped or
emptied partition leaves goes to the others. A job `ahead` places back in its partition
starts when its partition has admitted `ahead + 1` jobs.

Why fluid and not a replay of admission: the replay would need every waiting job's
class, weight and run time, and the store's counters give counts. The range around the
estimate is what that simplification, polling and run-time spread cost (see `_spread`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

# z for the 10th and 90th percentiles of a normal spread.
Z90 = 1.2816
# Relative spread of a rate the policy sets (tokens, slots, ceilings): polling, commits,
# the rotation's position inside a round.
POLICY_SPREAD = 0.12
# Relative spread when slots set the pace: a worker's own per-job cost (admission, ack,
# its dispatcher's turn) is not in the measured run time, so these come out early.
WORKER_SPREAD = 0.25
# Relative spread of a rate only measured (the queue's completions lately).
MEASURED_SPREAD = 0.35
# Absolute half-width under every range: a worker's poll and the admit's commit.
FLOOR_MS = 100
# A candidate limit beyond these is refused as absurd (what-if inputs).
MAX_LIMIT = 1_000_000_000
MAX_SLOTS = 1_000_000

# Why a waiting job has no expected start.
REASONS = (
    "queue_paused",       # nothing in the queue is admitted until it is resumed
    "rate_class_paused",  # the kill switch: nothing spending its tokens is admitted
    "weight_exceeds_burst",  # the bucket never holds that many tokens
    "quarantined",        # its fingerprint is quarantined; only a release lets it run
    "no_live_worker",     # no running worker serves the queue
    "no_measurements",    # no run time, rate class or completions to go by
    "pending",            # it waits for an operator to promote it
    "not_waiting",        # running or finished: there is no start to expect
)


@dataclass(frozen=True, slots=True)
class RunTime:
    """A kind's measured run time: the mean and the coefficient of variation."""

    mean_ms: float
    cv: float = 0.0

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any] | None) -> RunTime | None:
        """From a latency summary (`core/latency.summary`: count, mean_ms, p50_ms,
        p95_ms); the spread is read from p95 over p50 as a normal's would be."""
        if not summary or not summary.get("count") or not summary.get("mean_ms"):
            return None
        mean = float(summary["mean_ms"])
        p50, p95 = summary.get("p50_ms"), summary.get("p95_ms")
        cv = 0.0
        if p50 is not None and p95 is not None and mean > 0:
            cv = max(0.0, (float(p95) - float(p50)) / 1.645 / mean)
        return cls(max(mean, 1.0), min(cv, 3.0))


@dataclass(frozen=True, slots=True)
class RateInput:
    """A rate class now: its settings and the tokens in its bucket."""

    limit: int
    window_ms: int
    burst: int
    tokens: float
    paused: bool = False


@dataclass(frozen=True, slots=True)
class WorkerInput:
    """A live worker: the queues it serves, its slots and how many are busy."""

    queues: tuple[str, ...]
    slots: int
    busy: int = 0


@dataclass(frozen=True, slots=True)
class QueueInput:
    """One queue's numbers: its available and running jobs per partition, its tightest
    concurrency limit (per partition), and its measured completions per second."""

    name: str
    paused: bool = False
    weight: int = 1
    waiting: Mapping[str, int] = field(default_factory=dict)
    running: Mapping[str, int] = field(default_factory=dict)
    ceiling: int | None = None
    drain_per_s: float = 0.0

    @property
    def backlog(self) -> int:
        return sum(self.waiting.values())


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything shared by the predictions of one moment: queues, rate classes, live
    workers, and how many available jobs wait on each class (all queues together)."""

    queues: Mapping[str, QueueInput]
    rates: Mapping[str, RateInput] = field(default_factory=dict)
    workers: Sequence[WorkerInput] = ()
    class_waiting: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Place:
    """A waiting job's place: its queue and partition, the jobs before it in the
    partition's admission order, what it spends and how long its kind runs."""

    queue: str
    partition: str = ""
    ahead: int = 0
    rate_class: str = ""
    weight: int = 1
    run: RunTime | None = None
    quarantined: bool = False


@dataclass(frozen=True, slots=True)
class Prediction:
    """ms from now with its 10th-90th percentile range, or None and the reason.
    `bound` names what sets the pace: workers, rate_class, concurrency_limit,
    measured (the queue's completion rate), or now (admitted at once)."""

    ms: int | None
    p10_ms: int | None = None
    p90_ms: int | None = None
    reason: str | None = None
    bound: str | None = None

    @classmethod
    def unknown(cls, reason: str) -> Prediction:
        return cls(None, None, None, reason, None)

    def as_dict(self) -> dict[str, Any]:
        return {"ms": self.ms, "p10_ms": self.p10_ms, "p90_ms": self.p90_ms,
                "reason": self.reason, "bound": self.bound}


@dataclass(frozen=True, slots=True)
class Flow:
    """How fast one queue admits jobs of one class (jobs per ms) and what goes at once."""

    rate: float
    instant: int
    partition_cap: float | None
    room: Mapping[str, int]
    bound: str
    spread: float


def flow(snap: Snapshot, queue: QueueInput, rate_class: str = "", weight: int = 1,
         run: RunTime | None = None) -> Flow | str:
    """The queue's admission rate for jobs like this one, or the reason there is none."""
    if queue.paused:
        return "queue_paused"
    bucket = snap.rates.get(rate_class) if rate_class else None
    if bucket is not None:
        if bucket.paused:
            return "rate_class_paused"
        if weight > bucket.burst:
            return "weight_exceeds_burst"
    slots, free = _slot_share(snap, queue)
    if slots <= 0:
        return "no_live_worker"
    rates: list[tuple[float, str]] = []
    instant = math.floor(free)
    if run is not None:
        rates.append((slots / run.mean_ms, "workers"))
    if bucket is not None:
        share = _class_share(snap, queue, rate_class)
        rates.append((bucket.limit / bucket.window_ms / weight * share, "rate_class"))
        instant = min(instant, math.floor(bucket.tokens / weight * share + 1e-9))
    cap = None
    room: dict[str, int] = {}
    if queue.ceiling is not None:
        room = {p: max(0, queue.ceiling - queue.running.get(p, 0)) for p in queue.waiting}
        if run is not None:
            cap = queue.ceiling / run.mean_ms
    if not rates:
        if queue.drain_per_s <= 0:
            return "no_measurements"
        return Flow(queue.drain_per_s / 1000, instant, cap, room, "measured", MEASURED_SPREAD)
    rate, bound = min(rates)
    if cap is not None and cap * max(1, len(queue.waiting)) < rate:
        bound = "concurrency_limit"
    spread = POLICY_SPREAD if bound == "rate_class" else WORKER_SPREAD
    return Flow(rate, max(0, instant), cap, room, bound, spread)


def _slot_share(snap: Snapshot, queue: QueueInput) -> tuple[float, float]:
    """The slots (and free slots) of the live workers serving the queue, each worker's
    shared by weight between those of its queues that have work, as admission's
    weighted shares split a worker's capacity."""
    slots = free = 0.0
    for w in snap.workers:
        if queue.name not in w.queues or w.slots <= 0:
            continue
        total = 0
        for name in w.queues:
            other = snap.queues.get(name)
            if name == queue.name or (other is not None and other.backlog > 0
                                      and not other.paused):
                total += max(1, other.weight if other is not None else 1)
        share = max(1, queue.weight) / total if total else 1.0
        slots += w.slots * share
        free += max(0, w.slots - w.busy) * share
    return slots, free


def _class_share(snap: Snapshot, queue: QueueInput, rate_class: str) -> float:
    """The queue's part of a class other queues wait on too: its backlog's part of the
    class's waiting jobs (a queue with nothing waiting would get it all)."""
    mine = queue.backlog
    total = snap.class_waiting.get(rate_class, 0)
    if total <= mine or mine <= 0:
        return 1.0
    return mine / total


def _fair_counts(wanted: Mapping[str, int], total: int) -> dict[str, int]:
    """`total` jobs spread over partitions as round robin spreads them: one each per
    round, a partition out of `wanted` dropping out."""
    got = dict.fromkeys(wanted, 0)
    left = total
    active = [p for p, n in wanted.items() if n > 0]
    while left > 0 and active:
        each = max(1, left // len(active))
        still = []
        for p in active:
            take = min(each, wanted[p] - got[p], left)
            got[p] += take
            left -= take
            if got[p] < wanted[p]:
                still.append(p)
            if left <= 0:
                break
        active = still
    return got


def _finish_times(remaining: Mapping[str, float], rate: float,
                  cap: float | None) -> dict[str, float]:
    """When each partition has admitted its `remaining` jobs, the queue admitting
    `rate` jobs per ms shared equally (max-min fair) and each partition at most `cap`."""
    left = {p: float(n) for p, n in remaining.items() if n > 0}
    done = {p: 0.0 for p, n in remaining.items() if n <= 0}
    t = 0.0
    while left:
        rates = _max_min(list(left), rate, cap)
        step = min(left[p] / rates[p] for p in left)
        t += step
        for p in list(left):
            left[p] -= rates[p] * step
            if left[p] <= 1e-9:
                done[p] = t
                del left[p]
    return done


def _max_min(parts: list[str], rate: float, cap: float | None) -> dict[str, float]:
    each = rate / len(parts)
    if cap is not None and cap < each:
        each = cap  # every partition capped: the capacity left over goes unused
    return dict.fromkeys(parts, max(each, 1e-12))


def _spread(f: Flow, ms: float, admitted_before: float, run: RunTime | None) -> tuple[int, int]:
    """The 10th and 90th percentiles around `ms`. Relative: the flow's own spread and,
    when slots set the pace, the run times' (a sum of n of them varies by cv/sqrt(n));
    absolute: FLOOR_MS and one admission's interval."""
    u2 = f.spread ** 2
    if run is not None and f.bound in ("workers", "concurrency_limit"):
        u2 += run.cv ** 2 / max(1.0, admitted_before)
    u = math.sqrt(u2)
    pad = FLOOR_MS + (1 / f.rate if f.rate > 0 else 0)
    low = max(0.0, ms * (1 - Z90 * u) - pad)
    high = ms * (1 + Z90 * u) + pad
    return round(low), round(high)


def predict(snap: Snapshot, place: Place) -> Prediction:
    """The expected start of the job at `place`, from now, with its range."""
    if place.quarantined:
        return Prediction.unknown("quarantined")
    queue = snap.queues.get(place.queue) or QueueInput(place.queue)
    waiting = dict(queue.waiting)
    # The job and those ahead of it wait in its partition whatever the counters say.
    waiting[place.partition] = max(waiting.get(place.partition, 0), place.ahead + 1)
    queue = replace(queue, waiting=waiting)
    f = flow(snap, queue, place.rate_class, place.weight, place.run)
    if isinstance(f, str):
        return Prediction.unknown(f)
    need = {p: n for p, n in waiting.items()}
    need[place.partition] = place.ahead + 1
    start, before = _start_ms(f, need, place.partition)
    if start is None:
        return Prediction(0, 0, FLOOR_MS, None, "now")
    low, high = _spread(f, start, before, place.run)
    return Prediction(round(start), low, high, None, f.bound)


def _start_ms(f: Flow, need: Mapping[str, int], target: str) -> tuple[float | None, float]:
    """When `target` has admitted need[target] jobs (None: at once), and about how many
    jobs of the queue are admitted before then."""
    instant = f.instant
    if f.room:
        instant = min(instant, sum(min(n, f.room.get(p, 0)) for p, n in need.items()))
        wanted = {p: min(n, f.room.get(p, 0)) for p, n in need.items()}
    else:
        wanted = dict(need)
    now = _fair_counts(wanted, instant)
    if now.get(target, 0) >= need[target]:
        return None, 0.0
    remaining = {p: need[p] - now.get(p, 0) for p in need}
    # Other partitions compete only with what they still hold at the job's turn: the
    # fluid model lets them drain at their share until empty.
    times = _finish_times(remaining, f.rate, f.partition_cap)
    at = times[target]
    before = instant + sum(min(float(remaining[p]), at * f.rate / max(1, len(remaining)))
                           for p in remaining)
    return at, before


def drain_ms(snap: Snapshot, queue_name: str, rate_class: str = "", weight: int = 1,
             run: RunTime | None = None) -> Prediction:
    """How long until every job now waiting in the queue has started (and, with a
    measured run time, finished): the current backlog, arrivals left out."""
    queue = snap.queues.get(queue_name) or QueueInput(queue_name)
    if queue.backlog <= 0:
        return Prediction(0, 0, 0, None, "now")
    f = flow(snap, queue, rate_class, weight, run)
    if isinstance(f, str):
        return Prediction.unknown(f)
    need = dict(queue.waiting)
    wanted = {p: min(n, f.room.get(p, 0)) for p, n in need.items()} if f.room else need
    now = _fair_counts(wanted, min(f.instant, sum(wanted.values())))
    remaining = {p: need[p] - now.get(p, 0) for p in need}
    times = _finish_times(remaining, f.rate, f.partition_cap)
    last = max(times.values(), default=0.0)
    total = last + (run.mean_ms if run is not None else 0.0)
    low, high = _spread(f, total, queue.backlog, run)
    return Prediction(round(total), low, high, None, f.bound)


# -- what-if ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Change:
    """A candidate policy change; None leaves a setting as it is."""

    rate_class: str | None = None
    limit: int | None = None
    window_ms: int | None = None
    burst: int | None = None
    concurrency_limit_queue: str | None = None
    max_concurrent: int | None = None
    queue: str | None = None
    weight: int | None = None
    more_slots: int = 0
    slots_queues: tuple[str, ...] = ()


def apply(snap: Snapshot, change: Change) -> Snapshot:
    """The snapshot as it would be with `change` made (the bucket keeps its tokens,
    capped by a smaller burst; a new limit's burst follows it when none is given, as
    the store's upsert does)."""
    rates = dict(snap.rates)
    if change.rate_class is not None and change.rate_class in rates:
        r = rates[change.rate_class]
        limit = change.limit if change.limit is not None else r.limit
        window = change.window_ms if change.window_ms is not None else r.window_ms
        if change.burst is not None:
            burst = change.burst
        elif change.limit is not None and r.burst == r.limit:
            burst = limit
        else:
            burst = r.burst
        rates[change.rate_class] = RateInput(limit, window, burst, min(r.tokens, burst),
                                             r.paused)
    queues = dict(snap.queues)
    if change.concurrency_limit_queue is not None and change.max_concurrent is not None:
        q = queues.get(change.concurrency_limit_queue)
        if q is not None:
            queues[q.name] = replace(q, ceiling=change.max_concurrent)
    if change.queue is not None and change.weight is not None and change.queue in queues:
        queues[change.queue] = replace(queues[change.queue], weight=change.weight)
    workers = list(snap.workers)
    if change.more_slots > 0:
        workers.append(WorkerInput(tuple(change.slots_queues), change.more_slots, 0))
    return Snapshot(queues, rates, workers, snap.class_waiting)
