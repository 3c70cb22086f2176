"""Presentation helpers: numbers, times and policy decisions turned into words.

Pure functions of store records, so the page views and the live socket render the same
words, and the tests can check the sentences without a browser. Nothing here returns
markup: every string is escaped by Jinja where it is used.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from headgate.core import TERMINAL, Explanation, Job, State, drain
from headgate.core.clock import wall_ms
from headgate.core.records import WorkerRecord
from headgate.core.transitions import sources_of

# The order the Jobs sidebar lists states in: the flow of a job, then the outcomes.
STATE_ORDER: tuple[str, ...] = (
    "pending", "scheduled", "available", "running", "retryable",
    "completed", "archived", "cancelled", "quarantined", "undecodable",
)

STATE_HELP: dict[str, str] = {
    "pending": "held until an operator promotes them",
    "scheduled": "waiting for their scheduled time",
    "available": "waiting to be admitted by a worker",
    "running": "leased by a worker right now",
    "retryable": "failed an attempt; backing off before the next",
    "completed": "finished successfully",
    "archived": "dead letters: attempts exhausted or skipped",
    "cancelled": "cancelled by an operator or a concurrency limit",
    "quarantined": "their fingerprint crashed workers too often",
    "undecodable": "no handler or payload decoder could read them",
}

WORKER_SIGNALS: tuple[str, ...] = ("quiet", "resume", "restart", "terminate", "resign")
SIGNAL_HELP: dict[str, str] = {
    "quiet": "stop taking new jobs, finish the running ones",
    "resume": "start taking jobs again",
    "restart": "drain, then exit for the supervisor to start a fresh process",
    "terminate": "shut down gracefully (bounded drain)",
    "resign": "give up duty leases only (scheduler, reclaimer…)",
}


def dom_id(prefix: str, name: str) -> str:
    """A stable, HTML-safe element id for a record whose name may be anything at all
    (queue names and worker ids are operator data and may contain `<`, quotes, spaces)."""
    return f"{prefix}-{hashlib.sha1(name.encode()).hexdigest()[:12]}"


def duration(ms: int | float | None, *, empty: str = "—") -> str:
    """`1h 4m`, `3m 20s`, `4.2 s`, `800 ms`: two units at most, as a person says it."""
    if ms is None:
        return empty
    ms = int(ms)
    if ms < 0:
        ms = 0
    if ms < 1000:
        return f"{ms} ms"
    if ms < 10_000:
        return f"{ms / 1000:.1f} s"
    seconds = ms // 1000
    days, rem = divmod(seconds, 86_400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs} s"


def ago(at_ms: int | None, now: int | None = None) -> str:
    if not at_ms:
        return "—"
    now = now if now is not None else wall_ms()
    delta = now - at_ms
    if delta < 0:
        return f"in {duration(-delta)}"
    return f"{duration(delta)} ago"


def clock(at_ms: int | None) -> str:
    """Absolute UTC time (the tooltip and the timeline use it; ages are relative)."""
    if not at_ms:
        return "—"
    # gmtime, not datetime: a job row shows one, and this is three times cheaper.
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at_ms // 1000))


def number(n: int | float | None) -> str:
    if n is None:
        return "—"
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.2f}"
    return f"{int(n):,}"


def byte_size(n: int | None) -> str:
    """`0 B`, `812 kB`, `491.2 MB`, `1.3 GB` (decimal units, as disk tools print them)."""
    if n is None:
        return "—"
    for size, unit in ((10**9, "GB"), (10**6, "MB"), (1000, "kB")):
        if n >= size:
            return f"{n / size:.1f} {unit}" if n < 100 * size else f"{n // size:,} {unit}"
    return f"{n} B"


def rate(per_s: float | None) -> str:
    """Jobs per second, or per minute when slower than one a second."""
    if not per_s:
        return "0/min"
    if per_s < 1:
        return f"{per_s * 60:.1f}/min"
    return f"{per_s:.1f}/s"


def time_to_drain(queue: dict[str, Any]) -> tuple[str, str, str]:
    """The headline of a queue row: (words, tone, trend) where tone is
    ok|warn|bad|idle. Reads the smoothed forecast the views attach (headgate.core.drain);
    a row without one (rendered by older callers) falls back to the store's numbers."""
    f = queue.get("forecast")
    if f is None:
        by_state = queue.get("by_state", {})
        backlog = sum(by_state.get(s, 0) for s in ("available", "running", "retryable"))
        f = drain.forecast(backlog, drain.Rates(queue.get("arrival_rate") or 0.0,
                                                queue.get("drain_rate") or 0.0),
                           paused=bool(queue.get("paused")))
    if queue.get("stall") and queue.get("blocker"):
        by_state = queue.get("by_state") or {}
        waiting = int(by_state.get("available", 0) or 0)
        why = ("nothing finished for a minute" if by_state.get("running")
               else f"{number(waiting)} waiting, none running")
        return f"stalled: {queue['blocker']['short']}", "bad", why
    if f.trend == "empty":
        by_state = queue.get("by_state") or {}
        if by_state.get("scheduled"):
            return "nothing due now", "idle", f"{number(by_state['scheduled'])} scheduled later"
        if by_state.get("pending"):
            return "held", "idle", f"{number(by_state['pending'])} pending an operator"
        return "empty", "idle", ""
    if f.trend == "paused":
        return "paused — not draining", "bad", ""
    if f.trend == "stalled":
        return "not draining", "bad", "nothing finished lately"
    if f.trend == "growing":
        return "growing", "warn", f"↑ {rate(f.arrival - f.drain)} more in than out"
    if f.trend == "steady":
        return (f"keeping up · {duration(f.ttd_ms)} behind", "ok" if (f.ttd_ms or 0) <= 15 * 60_000
                else "warn", f"→ steady at {rate(f.drain)}")
    return (f"drains in {duration(f.ttd_ms)}", "warn" if (f.ttd_ms or 0) > 15 * 60_000 else "ok",
            f"↓ {rate(f.drain - f.arrival)} net")


# -- admission explanations -------------------------------------------------------------

def explain_sentences(exp: Explanation | None, job: Job, now: int | None = None) -> list[str]:
    """`explain_admission` in plain words: one sentence per blocked_by value, with the
    blocking policy's numbers, so "why is this not running?" has an answer."""
    if exp is None:
        return ["This job no longer exists."]
    d = exp.detail or {}
    blocked = exp.blocked_by
    state = d.get("state", job.state.value)
    if blocked == "rate_class":
        name = d.get("rate_class", job.rate_class)
        if d.get("paused"):
            return [f"Waiting for rate class {name}: it is paused (the kill switch), so "
                    "nothing that spends its tokens is admitted until it is resumed."]
        left = tokens(d.get("tokens_available"))
        burst = d.get("burst")
        refill = d.get("refill_in_ms")
        weight = d.get("weight", job.weight)
        needs = f"; this job costs {weight}" if weight and weight != 1 else ""
        when = f", refills in {duration(refill)}" if refill is not None else ""
        return [f"Waiting for rate class {name}: {left} of {burst} tokens{when}{needs} "
                f"(limit {per_window(d.get('limit'), d.get('window_ms'))})."]
    if blocked == "concurrency_limit":
        part = d.get("partition_key") or ""
        where = f"partition {part}" if part else "the default partition"
        return [f"Waiting for concurrency limit {d.get('limit')}: {d.get('running')} of "
                f"{d.get('max_concurrent')} running in {where} of queue {d.get('queue')}; "
                f"it is admitted when one of them finishes (on saturation: "
                f"{d.get('on_saturated')})."]
    if blocked == "fairness":
        part = d.get("partition_key") or ""
        where = f"partition {part}" if part else "the default partition"
        ahead = d.get("position_in_partition", 0)
        return [f"Waiting its turn in {where}: {number(ahead)} "
                f"job{'s' if ahead != 1 else ''} ahead of it (higher priority or older); "
                f"the partition has {d.get('partition_running', 0)} running and "
                f"{d.get('partition_waiting', 0)} waiting."]
    if blocked == "quarantine":
        return [f"Held by quarantine: its fingerprint {d.get('fingerprint', job.fingerprint)} "
                f"lost {d.get('crash_count', '?')} worker leases; release it on the "
                "Quarantine page to let it run."]
    if blocked == "queue_paused":
        return [f"Queue {d.get('queue', job.queue)} is paused: nothing in it is admitted "
                "until it is resumed."]
    if blocked == "schedule":
        due = d.get("due_in_ms", exp.estimated_admission_ms)
        when = clock(d.get("scheduled_at_ms"))
        if state == "retryable":
            return [f"Backing off after a failed attempt: retries in {duration(due)} "
                    f"(at {when})."]
        return [f"Scheduled: becomes available in {duration(due)} (at {when})."]
    if blocked is not None:  # a policy this console does not know yet: say so honestly
        return [f"Blocked by {blocked}: {json.dumps(d, sort_keys=True)}"]
    # Nothing blocks it.
    if exp.admissible:
        sticky = d.get("sticky_worker")
        who = f"worker {sticky}" if sticky else "the next worker polling"
        return [f"Admissible now: {who} queue {d.get('queue', job.queue)} with free capacity "
                "takes it."]
    now = now if now is not None else wall_ms()
    if state == "running":
        exp_at = job.lease_expires_at_ms
        lease = f"; its lease expires in {duration(exp_at - now)}" if exp_at else ""
        return [f"Running on worker {job.worker_id or '?'}{lease}."]
    if state == "pending":
        return ["Pending: it waits for an operator to promote it (nothing promotes it "
                "automatically)."]
    if state == "quarantined":
        return [f"Quarantined: jobs with its fingerprint {job.fingerprint} lost their worker's "
                "lease too often. Release the fingerprint on the Quarantine page to run it "
                "again."]
    if state == "archived":
        return ["Dead letter: it used up its attempts or was skipped. Retry it to run it "
                "again."]
    if state == "undecodable":
        return ["Undecodable: the worker that took it had no handler or payload decoder "
                "for it. Deploy the handler, then retry it to run it again."]
    if state in {s.value for s in TERMINAL}:
        return [f"Finished ({state}): it will not run again unless an operator retries it."]
    return [f"Not admissible ({state})."]


def tokens(value: Any) -> str:
    """Whole tokens: admission spends them whole, so 0.4 of a token is none yet."""
    if value is None:
        return "?"
    return str(max(0, math.floor(float(value))))


# -- lifecycle timeline -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Step:
    label: str
    at_ms: int | None
    took: str  # how long the job spent in this step ("" when it is the last one)
    state: str  # colour key
    current: bool


def timeline(job: Job, now: int | None = None) -> list[Step]:
    """created → scheduled → waiting → running → terminal, with the time spent in each.

    Built from the timestamps the store keeps (enqueued, scheduled_at, attempted,
    finalized, the last error's time); a step the job skipped is left out rather than
    shown at zero. Each step lasts until the next one starts; the last open step is
    measured to now ("so far")."""
    now = now if now is not None else wall_ms()
    st = job.state.value
    terminal = st in {s.value for s in TERMINAL}
    enq = job.enqueued_at_ms
    sched = job.scheduled_at_ms or 0
    attempted = job.attempted_at_ms
    points: list[tuple[str, int, str]] = []
    if st == "pending" or (job.pending and attempted is None):
        points.append(("pending", enq, "pending"))
    elif sched > enq + 5 and (attempted is None or sched <= attempted):
        points.append(("scheduled", enq, "scheduled"))
        # A job cancelled (or deleted) before its time never waited: no step at a
        # time that had not come when it ended.
        ended = job.finalized_at_ms if terminal else now
        if (st != "scheduled" or attempted is not None) and sched <= (ended or now):
            points.append(("waiting", sched, "available"))
    else:
        points.append(("waiting", enq, "available"))
    if attempted is not None:
        points.append(("running", attempted, "running"))
        last = job.errors[-1] if job.errors else None
        failed_at = int(last.get("at_ms") or attempted) if last else attempted
        if st == "retryable":
            points.append(("backing off", failed_at, "retryable"))
        elif st in ("available", "scheduled") and sched > attempted:
            # Run again after a failure. An operator retry of a dead letter leaves
            # max_attempts one above the attempts spent, so a failure that used the
            # last attempt then was archived first: keep that step, then "retried".
            if last and attempted <= failed_at <= sched and \
                    int(last.get("attempt") or 0) >= job.max_attempts - 1:
                points.append(("archived", failed_at, "archived"))
                points.append(("retried", sched, "available"))
            elif last and attempted <= failed_at <= sched:
                points.append(("backing off", failed_at, "retryable"))
                points.append(("waiting", sched, "available"))
            else:
                points.append(("waiting", sched, "available"))
    if terminal:
        points.append((st, job.finalized_at_ms or (points[-1][1]), st))
    steps = [Step("created", enq, "", "pending", False)]
    for i, (label, at, colour) in enumerate(points):
        is_last = i + 1 == len(points)
        if is_last and terminal:
            took = ""
        elif is_last:
            took = duration(now - at) + " so far"
        else:
            took = duration(points[i + 1][1] - at)
        steps.append(Step(label, at, took, colour, is_last))
    return steps


# -- allowed actions --------------------------------------------------------------------

_RETRY = sources_of("operator_retry")
_CANCEL = sources_of("operator_cancel")
_PROMOTE = sources_of("operator_promote")
_RELEASE = sources_of("operator_release")


def job_actions(state: State | str) -> list[str]:
    """Which operator actions the transition table permits from `state` (and delete,
    which the table does not model: it is offered for everything but a running job,
    whose worker would otherwise ack into a void)."""
    s = State(state)
    actions: list[str] = []
    if s in _RETRY:
        actions.append("retry")
    if s in _PROMOTE:
        actions.append("promote")
    if s in (State.SCHEDULED, State.RETRYABLE):
        actions.append("run_now")  # POST /jobs/{id}/reschedule to now
    if s in _CANCEL:
        actions.append("cancel")
    if s in _RELEASE:
        actions.append("release")
    if s is not State.RUNNING:
        actions.append("delete")
    return actions


# The states each "… selected" button of the jobs list can act on (job_actions' rules):
# headgate.js turns a button off while no selected job is in one, since the API would
# refuse every id.
SELECTION_SOURCES: dict[str, list[str]] = {
    action: sorted(s.value for s in State if action in job_actions(s))
    for action in ("retry", "cancel", "delete")
}


def new_jobs_key(top_id: str, params: dict[str, Any]) -> str:
    """The live topic key of a Jobs page's "N new jobs" prompt: the id of its top row
    and its filter (the URL parameters but the cursor and the open job)."""
    return f"{top_id}|{urlencode(params, doseq=True)}"


def worker_signals(status: str | None, pending: str | None) -> list[str]:
    """Signals that make sense for a worker in `status` (a quiet worker can be resumed,
    a running one quieted; a worker already stopping only gets terminate/resign)."""
    status = (status or "running").lower()
    if status in ("stopped",):
        return []
    if status in ("stopping", "restarting"):
        return ["terminate", "resign"]
    if status == "quiet":
        return ["resume", "restart", "terminate", "resign"]
    return ["quiet", "restart", "terminate", "resign"]


# -- payloads ---------------------------------------------------------------------------

def render_bytes(data: bytes | None, limit: int = 64 * 1024) -> dict[str, Any]:
    """`{kind: json|text|hex|empty, text, truncated}`: JSON pretty-printed when it parses,
    UTF-8 text when it decodes, hex otherwise (never raw bytes into the page)."""
    if data is None:
        return {"kind": "none", "text": "", "truncated": False, "size": 0}
    size = len(data)
    if not data:
        return {"kind": "empty", "text": "", "truncated": False, "size": 0}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        shown = data[:limit // 3]
        lines = [shown[i:i + 16].hex(" ") for i in range(0, len(shown), 16)]
        return {"kind": "hex", "text": "\n".join(lines), "truncated": len(shown) < size,
                "size": size}
    pretty = _pretty_json(text)
    if pretty is not None:
        return {"kind": "json", "text": pretty[:limit], "truncated": len(pretty) > limit,
                "size": size}
    return {"kind": "text", "text": text[:limit], "truncated": len(text) > limit,
            "size": size}


def _pretty_json(text: str) -> str | None:
    """`text` re-indented, or None when it is not JSON this page can show as JSON.

    Stored bytes are whatever a producer wrote: nesting deeper than the parser's
    recursion limit, or a `\\ud800` escape that decodes to a lone surrogate (which no
    UTF-8 page can carry), must show as the text it is, never fail the page."""
    try:
        pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        pretty.encode("utf-8")
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return None
    return pretty


def utilization(worker: WorkerRecord) -> float:
    return worker.inflight / worker.concurrency if worker.concurrency else 0.0


def pct(frac: float | None) -> str:
    return f"{(frac or 0) * 100:.0f}%"


# -- policy and schedule words ------------------------------------------------------------

_UNITS = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1000, "second"))


def period(ms: int | None) -> str:
    """A window or an interval as a person says it: `minute`, `5 minutes`, `1.5 s`."""
    if not ms or ms <= 0:
        return "—"
    for size, unit in _UNITS:
        if ms % size == 0:
            n = ms // size
            return unit if n == 1 else f"{n} {unit}s"
    return duration(ms)


def per_window(limit: int | None, window_ms: int | None) -> str:
    """`2 per minute`, `20 per second`, `5 per 10 minutes` (was `2 per 1m 0s`)."""
    return f"{number(limit)} per {period(window_ms)}"


_DOW = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_NUM = re.compile(r"[0-9]{1,2}")


def describe_spec(spec: str) -> str:
    """A plain-language reading of a schedule spec for the common shapes (`every day at
    03:00 UTC`, `weekdays at 08:00 Europe/Paris time`, `every 5 minutes`); "" for a
    shape it does not read, where the spec itself is the only honest description."""
    spec = spec.strip()
    if spec.startswith("@every:"):
        try:
            return f"every {period(int(spec[7:]))}"
        except ValueError:
            return ""
    zone = "UTC"
    if spec.startswith("CRON_TZ="):
        head, _, spec = spec.partition(" ")
        zone = f"{head[8:]} time"
    fields = spec.split()
    if len(fields) == 6:
        if fields[0] not in ("0", "00"):
            return ""
        fields = fields[1:]
    if len(fields) != 5:
        return ""
    minute, hour, dom, month, dow = fields
    if month != "*":
        return ""
    if hour == "*" and dom == "*" and dow == "*":
        if minute == "*":
            return "every minute"
        if minute.startswith("*/") and _NUM.fullmatch(minute[2:]):
            return f"every {minute[2:]} minutes"
        if _NUM.fullmatch(minute):
            return f"every hour at :{int(minute):02d}"
        return ""
    if not _NUM.fullmatch(minute):
        return ""
    if hour.startswith("*/") and _NUM.fullmatch(hour[2:]) and dom == "*" and dow == "*":
        return f"every {hour[2:]} hours at :{int(minute):02d}"
    hours = hour.split(",")
    if not all(_NUM.fullmatch(h) for h in hours):
        return ""
    at = " and ".join(f"{int(h):02d}:{int(minute):02d}" for h in hours)
    if dom == "*" and dow == "*":
        days = "every day"
    elif dom == "*" and dow == "1-5":
        days = "weekdays"
    elif dom == "*" and dow in ("0,6", "6,0", "6,7", "SAT,SUN"):
        days = "weekends"
    elif dom == "*" and all(_NUM.fullmatch(d) and int(d) <= 7 for d in dow.split(",")):
        names = [_DOW[int(d) % 7] + "s" for d in dow.split(",")]
        days = "on " + ", ".join(names)
    elif dow == "*" and _NUM.fullmatch(dom):
        days = f"on day {int(dom)} of every month"
    else:
        return ""
    return f"{days} at {at} {zone}"


def when(at_ms: int | None, now: int | None = None) -> str:
    """`in 8h 13m · 03:00 UTC` (with the weekday when it is not within a day)."""
    if not at_ms:
        return "—"
    now = now if now is not None else wall_ms()
    fmt = "%H:%M UTC" if abs(at_ms - now) < 86_400_000 else "%a %d %b %H:%M UTC"
    return f"{ago(at_ms, now)} · {time.strftime(fmt, time.gmtime(at_ms // 1000))}"


def last_error(job: Job) -> dict[str, Any] | None:
    """The newest recorded error as the failures view shows it: `kind` (the exception
    class, the text before the first `:` when it looks like one), the rest of its first
    line, the whole text, the attempt and when it happened."""
    if not job.errors:
        return None
    e = job.errors[-1]
    text = str(e.get("error") or "")
    first = text.split("\n", 1)[0]
    head, sep, rest = first.partition(":")
    is_class = bool(sep) and bool(_ERROR_CLASS.fullmatch(head))
    return {"kind": head if is_class else "", "line": rest.strip() if is_class else first,
            "text": text, "attempt": e.get("attempt"), "at_ms": e.get("at_ms"),
            "outcome": e.get("outcome") or "", "worker": e.get("worker")}


_ERROR_CLASS = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}")

_OUTCOME_WORDS = {
    "skip": "skipped → archived",
    "undecodable": "undecodable: no handler or decoder",
    "lease_lost": "lease lost: its worker stopped renewing",
    "cancel_incoming": "cancelled by a concurrency limit",
    "cancel_running": "cancelled to make room under a concurrency limit",
    "snooze": "snoozed",
    "rate_limited": "rate limited → waiting again",
    "success": "succeeded",
    "revoke": "revoked",
}


def attempt_label(entry: dict[str, Any], job: Job, last: bool) -> str:
    """What one recorded attempt led to, in words. The stored `outcome` is what the
    handler asked for ("retry" for any raised error), not what happened: the last of
    its attempts was archived, so the list must not call it a retry."""
    outcome = str(entry.get("outcome") or "")
    if outcome != "retry":
        return _OUTCOME_WORDS.get(outcome, outcome or "failed")
    n = int(entry.get("attempt") or 0)
    state = job.state.value
    if n >= job.max_attempts or (last and state == "archived"):
        return "failed → archived: no attempts left"
    if last and state == "retryable":
        return "failed → retries after a backoff"
    return "failed → retried"


def attempts(job: Job) -> list[dict[str, Any]]:
    """The job's recorded attempts, newest first, each with attempt_label's words."""
    n = len(job.errors)
    return [{**e, "label": attempt_label(e, job, i == n - 1)}
            for i, e in reversed(list(enumerate(job.errors)))]


# -- expected starts (headgate/services/forecasting.py) -------------------------------

NO_START = {
    "queue_paused": "No expected start: its queue is paused.",
    "rate_class_paused": "No expected start: its rate class is paused.",
    "weight_exceeds_burst": "No expected start: it costs more tokens than its rate class "
                            "ever holds.",
    "quarantined": "No expected start: its fingerprint is quarantined.",
    "no_live_worker": "No expected start: no running worker serves its queue.",
    "no_measurements": "No expected start yet: no run time, rate class or completions to "
                       "go by.",
}


def _span_unit(ms: float) -> tuple[float, str]:
    if ms < 90_000:
        return 1000.0, "s"
    if ms < 90 * 60_000:
        return 60_000.0, "min"
    return 3_600_000.0, "h"


def _in_unit(ms: float, unit: float) -> str:
    value = ms / unit
    if unit > 1000 and value < 10:  # 1.5 min, not 2 min
        return f"{value:.1f}".removesuffix(".0")
    return str(round(value))


def expected_start(pred: Mapping[str, Any] | None) -> str | None:
    """`expected to start in about 40 s (20–70 s)`, or why there is no such number;
    None where there is nothing to say (running, finished)."""
    if not pred:
        return None
    ms, reason = pred.get("ms"), pred.get("reason")
    if ms is None:
        return NO_START.get(str(reason))
    if pred.get("bound") == "now" or ms <= 0:
        return "Expected to start now, at the next worker's poll."
    low, high = pred.get("p10_ms") or 0, pred.get("p90_ms") or ms
    unit, name = _span_unit(max(ms, high))
    about = f"{_in_unit(ms, unit)} {name}"
    return (f"Expected to start in about {about} "
            f"({_in_unit(low, unit)}–{_in_unit(high, unit)} {name}).")


def expected_short(pred: Mapping[str, Any] | None) -> str | None:
    """The job list's cell: `~40 s`, with the range in the title."""
    if not pred or pred.get("ms") is None:
        return None
    ms = pred["ms"]
    if ms <= 0:
        return "now"
    unit, name = _span_unit(ms)
    return f"~{_in_unit(ms, unit)} {name}"


def blocker(exp: Explanation | None, served: bool) -> dict[str, Any] | None:
    """The policy keeping a queue's waiting jobs from running, as `{kind, text, short,
    name, hard, resume}` for the queue row, its page and the job sheet: `resume` is the
    PUT body that lifts a paused rate class (offered as a button); the other kinds link
    to their page. `hard` blockers admit nothing until an operator acts (a pause, a
    quarantine, a weight above the burst, no worker); the others (tokens, a full
    ceiling) lift by themselves as time passes or jobs finish."""
    if exp is None:
        return None
    d = exp.detail or {}
    b = exp.blocked_by
    if b == "queue_paused":
        return {"kind": "queue_paused", "text": "the queue is paused", "name": d.get("queue"),
                "short": "queue paused", "hard": True}
    if b == "rate_class":
        name = d.get("rate_class")
        if d.get("paused"):
            return {"kind": "rate_class_paused", "text": f"rate class {name} is paused",
                    "short": f"rate class {name} paused", "hard": True,
                    "name": name, "resume": {"limit": d.get("limit"),
                                             "window_ms": d.get("window_ms"),
                                             "burst": d.get("burst"), "paused": False}}
        if d.get("weight_exceeds_burst"):
            return {"kind": "rate_class", "name": name, "hard": True,
                    "short": f"job weight above rate class {name}'s burst",
                    "text": f"a job's weight {d.get('weight')} exceeds rate class {name}'s "
                            f"burst {d.get('burst')}"}
        return {"kind": "rate_class", "name": name, "hard": False,
                "short": f"rate class {name} out of tokens",
                "text": f"rate class {name} is out of tokens "
                        f"({per_window(d.get('limit'), d.get('window_ms'))})"}
    if b == "concurrency_limit":
        part = d.get("partition_key") or ""
        where = f"partition {part}" if part else "the default partition"
        return {"kind": "concurrency_limit", "name": d.get("limit"), "partition": part,
                "hard": False, "short": f"concurrency limit {d.get('limit')} full in {where}",
                "text": f"concurrency limit {d.get('limit')} reached in {where}: "
                        f"{d.get('running')} of {d.get('max_concurrent')} running"}
    if b == "quarantine":
        return {"kind": "quarantine", "name": d.get("fingerprint"), "hard": True,
                "short": "fingerprint quarantined",
                "text": "its jobs' fingerprint is quarantined"}
    if not served:
        return {"kind": "no_worker", "name": "", "hard": True,
                "short": "no live worker for the queue",
                "text": "no live worker consumes this queue"}
    return None


def stall(q: dict[str, Any], recent: bool) -> bool:
    """Whether the row's headline says "stalled: …" for its blocker: jobs wait, none
    runs and the blocker admits nothing until an operator acts; or nothing finished
    for a history bucket (`recent` false) while any blocker holds the waiting jobs."""
    b = q.get("blocker")
    if not b:
        return False
    by_state = q.get("by_state") or {}
    if not by_state.get("available"):
        return False
    if not recent:
        return True
    return bool(b.get("hard")) and not by_state.get("running")
