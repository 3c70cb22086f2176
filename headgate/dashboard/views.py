"""Console pages and fragments.

Each view does a handful of bounded store reads (counters, one page of at most 50 jobs,
one job by id, small policy tables) and renders a template; nothing here scans a queue.
HTMX requests ask for the same URLs and pick the part they need with `hx-select`, so
every fragment also has a real, shareable URL that renders the full page.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any
from urllib.parse import parse_qsl, quote

import flask
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as BaseResponse  # what flask.redirect returns

from headgate.core import HeadgateError, Job, JobFilter, JobPage, State, drain, names
from headgate.core.adaptive import HISTORY_SHOWN_MS
from headgate.core.clock import wall_ms
from headgate.core.latency import summaries, window_start
from headgate.core.records import (
    AuditEntry,
    PartitionState,
    QueueStats,
    RunningJob,
    Schedule,
    WorkerRecord,
)
from headgate.core.schema_constants import HISTORY_BUCKET_MS
from headgate.services.forecasting import Forecaster
from headgate.web import auth_throttle
from headgate.web.errors import error_response
from headgate.web.globals import get_store

from . import audit_view, auth, charts, present
from .query import JobQuery

bp = flask.Blueprint("dashboard", __name__)

PAGE_SIZE = 50
# GET /api/v1/workers and /cluster use the same rule: 15 minutes of heartbeat grace.
WORKER_STALE_MS = 900_000
WORKER_ALL_MS = 315_576_000_000_000
HISTORY_RANGES: dict[str, tuple[int, int]] = {  # label -> (span, bucket)
    "15m": (900_000, 60_000),
    "1h": (3_600_000, 60_000),
    "6h": (6 * 3_600_000, 300_000),
    "24h": (24 * 3_600_000, 900_000),
}
THROUGHPUT_SPAN_MS = 15 * 60_000
# The queue page's and a kind's percentiles: the last hour, as GET .../latency.
LATENCY_WINDOW_MS = 3_600_000
# Running jobs read for the workers page (more than any fleet's slots in practice).
RUNNING_LIMIT = 1000
# A transaction open longer than this is flagged on the Cluster page (the alert
# threshold docs/RELIABILITY.md suggests).
LONG_TRANSACTION_MS = 5 * 60_000
NAV: tuple[tuple[str, str, str], ...] = (
    ("overview", "dashboard.overview", "Queues"),
    ("jobs", "dashboard.jobs", "Jobs"),
    ("rate_classes", "dashboard.rate_classes", "Rate classes"),
    ("concurrency", "dashboard.concurrency", "Concurrency"),
    ("partitions", "dashboard.partitions", "Partitions"),
    ("quarantine", "dashboard.quarantine", "Quarantine"),
    ("periodic", "dashboard.periodic", "Periodic"),
    ("workers", "dashboard.workers", "Workers"),
    ("cluster", "dashboard.cluster", "Cluster"),
    ("audit", "dashboard.audit", "Audit log"),
)
_DEFAULT_QUERY = JobQuery()
READ_ONLY_REASON = (
    "Read-only mode: this server runs with HG_READ_ONLY=1, so changes are turned off "
    "(the API refuses them too)."
)
READ_ONLY_TOKEN_REASON = (
    "Read-only: you signed in with a read-only API token, so changes are turned off "
    "(the API refuses them too)."
)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def store() -> Any:
    return get_store()


def settings() -> Any:
    return flask.current_app.extensions["headgate.settings"]


def api_base() -> str:
    """Where the API lives from the browser's point of view (honours SCRIPT_NAME)."""
    return flask.request.script_root + "/api/v1"


# -- request hooks ------------------------------------------------------------------------

_OPEN_ENDPOINTS = frozenset({"dashboard.signin", "dashboard.signin_post"})


@bp.before_request
def _require_sign_in() -> BaseResponse | None:
    if flask.request.endpoint in _OPEN_ENDPOINTS or auth.signed_in():
        return None
    target = flask.url_for("dashboard.signin", next=flask.request.full_path.rstrip("?"))
    if flask.request.headers.get("HX-Request"):
        resp = flask.Response(status=401)
        resp.headers["HX-Redirect"] = target
        return resp
    return flask.redirect(target)


@bp.after_request
def _security_headers(resp: flask.Response) -> flask.Response:
    resp.headers.setdefault("Content-Security-Policy", CSP)
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    resp.headers.setdefault("Referrer-Policy", "same-origin")
    resp.headers.setdefault("X-Frame-Options", "DENY")
    if resp.mimetype == "text/html":
        # Pages carry live numbers and a CSRF value: never from a cache.
        resp.headers["Cache-Control"] = "no-store"
    return resp


@bp.app_context_processor
def _template_context() -> dict[str, Any]:
    s = settings()
    token_ro = auth.session_read_only()
    return {
        "read_only": s.read_only or token_ro,
        "ro_reason": READ_ONLY_TOKEN_REASON if token_ro and not s.read_only
        else READ_ONLY_REASON,
        "tokens_required": auth.tokens_required(s),
        "signed_in": auth.signed_in,  # called by the layout only, not by every fragment
        "csrf": auth.csrf_token(),
        "api_base": api_base(),
        "nav": NAV,
        "fmt": present,
        "names": names,
        "STATE_ORDER": present.STATE_ORDER,
        "STATE_HELP": present.STATE_HELP,
        "dom_id": present.dom_id,
        "now": wall_ms(),
        "seg": url_segment,
        "depth_segments": charts.depth_segments,
        # Defaults for fragments rendered outside the Jobs page (the live socket passes
        # the page's own query).
        "query": _DEFAULT_QUERY,
        "jobs_url": _DEFAULT_QUERY.links(flask.url_for("dashboard.jobs")),
    }


def url_segment(value: Any) -> str:
    """One path segment of an API URL: names are operator data and may hold `/`, `?`,
    `#` or spaces, none of which may change which route is called."""
    return quote(str(value), safe="")


@bp.errorhandler(404)
def _not_found(exc: HTTPException) -> tuple[str, int]:
    what = getattr(exc, "description", None) or "That page does not exist."
    return flask.render_template("dashboard/404.html", page="", title="Not found",
                                 message=what), 404


@bp.app_errorhandler(404)
def _unknown_path(exc: HTTPException) -> Any:
    """A path no route matches gets the console's own page, not Werkzeug's bare "Not
    Found", when it is below the console's prefix. This handler is more specific than
    the API's HTTPException one, so under /api/ it answers the API's JSON 404 itself
    (through the shared web.errors envelope), and elsewhere it leaves Werkzeug's."""
    prefix = flask.current_app.extensions.get("headgate.dashboard", {}).get("url_prefix", "")
    path = flask.request.path
    if path.startswith("/api/"):
        return error_response(404, "not found")
    if not path.startswith(prefix or "/"):
        return exc
    if flask.request.url_rule is None:  # no route at all, rather than a missing record
        return flask.render_template("dashboard/404.html", page="", title="Not found",
                                     message=f"There is no console page at {path}."), 404
    return _not_found(exc)


def not_found(message: str) -> flask.Response:
    flask.abort(404, description=message)
    raise AssertionError  # pragma: no cover - abort raises


def render(template: str, **ctx: Any) -> str:
    return flask.render_template(f"dashboard/{template}", **ctx)


# -- sign-in ------------------------------------------------------------------------------

@bp.get("/signin")
def signin() -> str | BaseResponse:
    if not auth.tokens_required():
        return flask.redirect(flask.url_for("dashboard.overview"))
    return render("signin.html", page="signin", title="Sign in", error="",
                  next=auth.safe_next(flask.request.args.get("next"), ""))


@bp.post("/signin")
def signin_post() -> tuple[str, int] | tuple[str, int, dict[str, str]] | BaseResponse:
    default = flask.url_for("dashboard.overview")
    nxt = auth.safe_next(flask.request.form.get("next"), default)
    if not auth.csrf_ok(flask.request.form.get("csrf")):
        return render("signin.html", page="signin", title="Sign in", next=nxt,
                      error="The form expired; please try again."), 400
    token = flask.request.form.get("token", "").strip()
    if wait := auth_throttle.wait_s():
        page = render("signin.html", page="signin", title="Sign in", next=nxt,
                      error=f"Too many failed attempts; try again in {wait} s.")
        return page, 429, {"Retry-After": str(wait)}
    if auth.caller_for(token) is None:
        auth_throttle.record_failure()
        return render("signin.html", page="signin", title="Sign in", next=nxt,
                      error="That token is not accepted by this server."), 401
    flask.session.clear()
    flask.session[auth.SESSION_TOKEN] = auth.token_ref(token)
    auth.csrf_token()  # a fresh CSRF value for the signed-in session
    return flask.redirect(nxt)


@bp.post("/signout")
def signout() -> BaseResponse:
    if auth.csrf_ok(flask.request.form.get("csrf")):
        flask.session.clear()
    return flask.redirect(flask.url_for("dashboard.signin"))


# -- queues -------------------------------------------------------------------------------

def queue_rows_data(s: Any, served: set[str] | None = None) -> list[dict[str, Any]]:
    """queue_stats with what the console adds to each row: the smoothed time-to-drain
    forecast (headgate.core.drain), the depth bar's shared scale, and for a queue that
    is not draining the policy that blocks it. Two reads for all queues (the stats, and
    every queue's recent per-minute counters), plus, per queue with waiting jobs that is
    not draining, runs none of them or finished nothing lately, one available job (an
    index probe) and its admission explanation. A row is the record's fields (the
    templates and present.py read it) and those additions."""
    stats: list[QueueStats] = s.queue_stats()
    now = s.now_ms()
    counters = s.history_counters(now - drain.WINDOW_MS - drain.BUCKET_MS)
    scale = max((q.unfinished_jobs for q in stats), default=0)
    rows = []
    for q in stats:
        buckets = counters.get(q.queue, {})
        forecast = drain.queue_forecast(q.by_state, q.paused, buckets, now)
        row = {**dataclasses.asdict(q), "forecast": forecast, "depth_scale": scale,
               "blocker": None, "stall": False}
        # Not only when the smoothed trend turns: jobs waiting with none running, or
        # nothing finished lately, are looked at now (the trend lags a pause by a minute).
        suspect = drain.stall_suspected(q.by_state, buckets, now)
        if (suspect or forecast.trend in ("paused", "stalled", "growing")) and \
                q.by_state.get("available"):
            if served is None:
                served = {n for w in s.list_workers(WORKER_STALE_MS) for n in w.queues}
            row["blocker"] = blocking_policy(s, q.queue, q.queue in served)
            row["stall"] = suspect and forecast.trend != "paused" and present.stall(
                row, drain.recently_drained(buckets, now))
        rows.append(row)
    return rows


def blocking_policy(s: Any, queue: str, served: bool) -> dict[str, Any] | None:
    """Why a queue's waiting jobs are not admitted, from one of them: its admission
    explanation names the policy (paused queue, paused or empty rate class, ceiling,
    quarantine); with nothing blocking it, a queue no live worker consumes says so."""
    page = s.list_jobs(JobFilter(queue=queue, state="available"), limit=1)
    if not page.jobs:
        return None
    exp = s.explain_admission(page.jobs[0].id)
    return present.blocker(exp, served)


@bp.get("/")
def overview() -> str:
    s = store()
    live = s.list_workers(WORKER_STALE_MS)
    served = {q for w in live for q in w.queues}
    queues = queue_rows_data(s, served)
    counts = s.counts()
    chart = throughput_chart(s)
    return render("overview.html", page="overview", title="Queues", queues=queues,
                  counts=counts, workers=live, served=served, chart=chart)


def throughput_chart(s: Any) -> charts.HistoryChart:
    """The overview's chart: every queue's per-minute counters of the last 15 minutes,
    summed (one read)."""
    now = s.now_ms()
    since = now - THROUGHPUT_SPAN_MS
    bucket = HISTORY_BUCKET_MS
    return charts.history_chart(charts.throughput(s.history_counters(since - since % bucket)),
                                since, now, bucket)


@bp.get("/queues/<path:name>")
def queue(name: str) -> str:
    s = store()
    stats = next((q for q in queue_rows_data(s) if q["queue"] == name), None)
    if stats is None:
        not_found(f"There is no queue named “{name}”.")
    span_key = flask.request.args.get("range", "15m")
    span, bucket = HISTORY_RANGES.get(span_key, HISTORY_RANGES["15m"])
    now = s.now_ms()
    since = now - span
    hist = s.history(name, since, bucket)
    chart = charts.history_chart(hist, since, now, bucket)
    limits = [c for c in s.concurrency_limits() if c.queue == name]
    return render("queue.html", page="queue", title=f"Queue {name}", q=stats, chart=chart,
                  latency=latency_data(s, queue=name),
                  range_key=span_key if span_key in HISTORY_RANGES else "15m",
                  ranges=HISTORY_RANGES, limits=limits)


# -- jobs ---------------------------------------------------------------------------------

def sheet_data(s: Any, job_id: str) -> dict[str, Any] | None:
    """Everything the job detail sheet shows, read by id (a handful of key lookups).
    Takes the store so the live hub can call it outside a request."""
    job: Job | None = s.get_job(job_id)
    if job is None:
        return None
    now = s.now_ms()
    exp = s.explain_admission(job_id)
    output = s.get_output(job_id)
    result = s.get_result(job_id)
    return {
        "job": job,
        "progress": s.get_progress(job_id),
        "explanation": exp,
        "sentences": present.explain_sentences(exp, job, now),
        "expected": (present.expected_start(Forecaster(s).predict_job(job, exp).as_dict())
                     if job.state is State.AVAILABLE else None),
        # The fix beside the words (Resume a paused rate class or queue, …), as the
        # overview's row offers it; whether a worker serves the queue is its concern.
        "blocker": present.blocker(exp, True) if job.state is State.AVAILABLE else None,
        "timeline": present.timeline(job, now),
        "last_error": present.last_error(job),
        "attempts": present.attempts(job),
        "actions": present.job_actions(job.state),
        "output": present.render_bytes(output.bytes) if output else None,
        "output_at": output.updated_at_ms if output else None,
        "result": present.render_bytes(result.bytes) if result else None,
        # Operator actions on this job (one index read of the audit log).
        "audit": audit_view.rows(s.list_audit(target=f"job:{job_id}", limit=5)),
        # What its worker registered as when that worker takes part over HTTP.
        "worker_agent": worker_agent(s, job.worker_id),
    }


def worker_agent(s: Any, worker_id: str | None) -> str | None:
    """The agent string of a worker on the worker protocol (None: a Python worker, or
    one the registry no longer remembers)."""
    if not worker_id:
        return None
    for w in s.list_workers(WORKER_ALL_MS):
        if w.worker_id == worker_id:
            return w.agent
    return None


@bp.get("/jobs")
def jobs() -> tuple[str, int]:
    s = store()
    query = JobQuery.from_args(flask.request.args)
    page = JobPage([], None)
    error = query.error
    if not error:
        try:
            page = s.list_jobs(query.filter, cursor=query.cursor or None, limit=PAGE_SIZE)
        except HeadgateError as exc:  # unknown state, invalid cursor: say it in words
            error = str(exc)
    # A list of one kind heads with that kind's percentiles (the console's kind page).
    kind_latency = latency_data(s, kind=query.filter.kind) if query.filter.kind else None
    counts = s.counts(query.queue or query.filter.queue or None)
    queue_names = [q.queue for q in s.queue_stats()]
    sheet = sheet_data(s, query.job) if query.job else None
    starts = expected_starts(s, page.jobs)
    selector, bulk_why = query.bulk_selector()
    # A missing job is a 404 for a page load; an HTMX refresh (after a delete) still
    # swaps, since htmx ignores error responses.
    missing = bool(query.job) and sheet is None
    status = 404 if missing and not flask.request.headers.get("HX-Request") else 200
    return render("jobs.html", page="jobs", title="Jobs", query=query, jobs=page.jobs,
                  jobs_url=query.links(flask.url_for("dashboard.jobs")),
                  next_cursor=page.next_cursor, error=error, counts=counts,
                  queue_names=queue_names, sheet=sheet, selector=selector,
                  bulk_why=bulk_why, kind_latency=kind_latency,
                  scan_limited=page.scan_limited, starts=starts), status


def expected_starts(s: Any, page: list[Job]) -> dict[str, dict[str, str | None]]:
    """The waiting jobs' expected starts for a list page: one gather of the shared
    inputs and one read of their places, however many jobs wait on the page."""
    waiting = [j for j in page if j.state is State.AVAILABLE]
    if not waiting:
        return {}
    preds = Forecaster(s).predict_jobs(waiting)
    return {job_id: {"short": present.expected_short(p.as_dict()),
                     "long": present.expected_start(p.as_dict())}
            for job_id, p in preds.items()}


# How many new jobs the list's prompt counts at most ("100+ new jobs").
NEW_JOBS_LIMIT = 100


def new_jobs_count(s: Any, key: str) -> int:
    """Jobs matching a Jobs page's filter that would stand above its top row (ids sort
    newest first), counted up to NEW_JOBS_LIMIT: one bounded page read per live frame
    for every open list with that filter. `key` is present.new_jobs_key's. A payload
    search is not repeated per frame (it reads up to thousands of payloads)."""
    top, _, raw = key.partition("|")
    query = JobQuery.from_args(MultiDict(parse_qsl(raw)))
    if query.error or getattr(query.filter, "payload_terms", None):
        return 0
    try:
        page = s.list_jobs(query.filter, limit=NEW_JOBS_LIMIT)
    except HeadgateError:
        return 0
    return sum(1 for j in page.jobs if j.id > top)


@bp.get("/jobs/<path:job_id>/payload")
def job_payload(job_id: str) -> str:
    job = store().get_job(job_id, include_payload=True)
    if job is None:
        not_found(f"There is no job with id “{job_id}”.")
    return render("_payload.html", job=job, payload=present.render_bytes(job.payload or b""))


@bp.get("/jobs/<path:job_id>")
def job(job_id: str) -> BaseResponse:
    if store().get_job(job_id) is None:
        not_found(f"There is no job with id “{job_id}”. It may have been deleted, or "
                  "removed by retention after it finished.")
    return flask.redirect(flask.url_for("dashboard.jobs", job=job_id))


@bp.get("/audit")
def audit() -> tuple[str, int]:
    """The audit log, newest first, a page at a time (the API's cursor: the last id)."""
    args = flask.request.args
    action = args.get("action", "").strip()
    target = args.get("target", "").strip()
    cursor_text = args.get("cursor", "").strip()
    entries: list[AuditEntry] = []
    error = ""
    cursor = int(cursor_text) if cursor_text.isascii() and cursor_text.isdigit() else None
    if cursor_text and cursor is None:
        error = "That page link is not valid; showing the newest entries."
    try:
        entries = store().list_audit(action=action or None, target=target or None,
                                     cursor=cursor, limit=audit_view.PAGE_SIZE)
    except HeadgateError as exc:
        error = str(exc)
    more = entries[-1].id if len(entries) == audit_view.PAGE_SIZE else None
    page = render("audit.html", page="audit", title="Audit log",
                  entries=audit_view.rows(entries), action=action, target=target,
                  actions=audit_view.ACTIONS, more=more, first_page=cursor is None,
                  error=error)
    return page, 400 if error else 200


@bp.get("/ops/<op_id>")
def operation(op_id: str) -> str:
    op = store().get_operation(op_id)
    if op is None:
        not_found(f"There is no bulk operation “{op_id}”.")
    return render("_operation.html", op=op)


# -- policies -----------------------------------------------------------------------------

@bp.get("/rate-classes")
def rate_classes() -> str:
    s = store()
    classes = s.rate_classes()
    edit = next((c for c in classes if c.name == flask.request.args.get("edit")), None)
    changes = audit_view.rows(s.list_audit(target_prefix="rate_class:", limit=10))
    # Adaptive classes: the limit's last hour, from the store's history of it.
    now = s.now_ms()
    since = now - HISTORY_SHOWN_MS
    limit_charts = {
        rc.name: charts.limit_chart(s.rate_class_history(rc.name, 0, 500), since, now,
                                    rc.limit_per_window, rc.adaptive.max)
        for rc in classes if rc.adaptive is not None}
    return render("rate_classes.html", page="rate_classes", title="Rate classes",
                  classes=classes, edit=edit, changes=changes, limit_charts=limit_charts)


@bp.get("/concurrency")
def concurrency() -> str:
    s = store()
    stats: list[QueueStats] = s.queue_stats()
    return render("concurrency.html", page="concurrency", title="Concurrency limits",
                  limits=s.concurrency_limits(), queue_names=[q.queue for q in stats],
                  queue_work={q.queue: q.by_state.get("available", 0)
                              + q.by_state.get("running", 0) for q in stats})


@bp.get("/partitions")
def partitions() -> tuple[str, int]:
    s = store()
    stats: list[QueueStats] = s.queue_stats()
    queue_names = [q.queue for q in stats]
    # Without a choice, the queue with the most waiting and running jobs (partitions
    # are listed while they have either), not the first name, which may have none.
    busiest = max(stats, key=lambda q: q.by_state.get("available", 0)
                  + q.by_state.get("running", 0), default=None)
    name = flask.request.args.get("queue") or (busiest.queue if busiest else "")
    rows: list[PartitionState] = []
    status = 200
    if name and name not in queue_names:
        flask.abort(404, description=f"There is no queue named “{name}”.")
    if name:
        rows = s.partitions(name)
    return render("partitions.html", page="partitions", title="Partitions",
                  queue_names=queue_names, queue=name, rows=rows), status


@bp.get("/quarantine")
def quarantine() -> str:
    return render("quarantine.html", page="quarantine", title="Quarantine",
                  entries=store().quarantine_list())


@bp.get("/periodic")
def periodic() -> str:
    schedules: list[Schedule] = store().list_schedules()
    edit = next((x for x in schedules if x.id == flask.request.args.get("edit")), None)
    return render("periodic.html", page="periodic", title="Periodic", schedules=schedules,
                  edit=edit, edit_payload=payload_for_editing(edit.payload) if edit else None)


# Larger payloads are kept, not shown: a textarea holding megabytes helps nobody.
EDIT_PAYLOAD_LIMIT = 64 * 1024


def payload_for_editing(data: bytes | None) -> dict[str, Any]:
    """How the edit form carries a schedule's payload.

    PUT /api/v1/periodic/{id} replaces the whole schedule, so the form always sends the
    stored bytes back (`b64`) unless the operator changed the text: a textarea cannot
    carry every byte string unchanged (binary, a CR, a NUL), and pretty-printing or
    truncating it would save new bytes. Only UTF-8 text of a readable size is offered
    for editing at all."""
    data = data or b""
    encoded = base64.b64encode(data).decode()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"editable": False, "text": "", "b64": encoded, "size": len(data),
                "why": "it is binary (not UTF-8 text)"}
    if len(data) > EDIT_PAYLOAD_LIMIT:
        return {"editable": False, "text": "", "b64": encoded, "size": len(data),
                "why": f"it is larger than {EDIT_PAYLOAD_LIMIT // 1024} KiB"}
    return {"editable": True, "text": text, "b64": encoded, "size": len(data), "why": ""}


@bp.get("/periodic/<path:schedule_id>")
def schedule(schedule_id: str) -> str:
    s = store()
    sched = s.get_schedule(schedule_id)
    events = s.list_schedule_events(schedule_id, None, 50)
    if sched is None and not events:
        not_found(f"There is no periodic schedule “{schedule_id}”.")
    return render("schedule.html", page="periodic", title=f"Schedule {schedule_id}",
                  sched=sched, schedule_id=schedule_id, events=events)


# -- fleet --------------------------------------------------------------------------------

@bp.get("/workers")
def workers() -> str:
    s = store()
    return render("workers.html", page="workers", title="Workers",
                  workers=s.list_workers(WORKER_STALE_MS), running=running_now(s))


def running_now(s: Any) -> list[dict[str, Any]]:
    """What each worker runs now (Sidekiq's Busy page): the running jobs' leases,
    longest-running first, each marked orphaned when its lease has expired (by the
    store's clock, which set it)."""
    now = s.now_ms()
    rows: list[RunningJob] = s.running_jobs(RUNNING_LIMIT)
    return [{**dataclasses.asdict(r),
             "orphaned": r.lease_expires_at_ms is not None and r.lease_expires_at_ms < now}
            for r in sorted(rows, key=lambda r: (r.attempted_at_ms or 0, r.id))]


def latency_data(s: Any, queue: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """Wait and run time percentiles over the last hour from the store's latency
    histograms (what /metrics exports): in all, and per kind for a queue or per queue
    for a kind. One grouped read of the window's minute buckets."""
    since = window_start(s.now_ms(), LATENCY_WINDOW_MS, HISTORY_BUCKET_MS)
    by = "kind" if queue is not None else "queue"
    totals, parts = summaries(s.latency_totals(since, queue=queue, kind=kind), by)
    return {"totals": totals, "parts": parts, "by": by, "queue": queue, "kind": kind,
            "window_ms": LATENCY_WINDOW_MS}


def cluster_summary(live: list[WorkerRecord], every: list[WorkerRecord],
                    queue_stats: list[QueueStats]) -> dict[str, Any]:
    """GET /api/v1/cluster's answer, computed from the same rows."""
    capacity = sum(w.concurrency for w in live)
    inflight = sum(w.inflight for w in live)
    polls = sum(w.polls for w in live)
    empty = sum(w.empty_polls for w in live)
    per_queue: dict[str, int] = {}
    for w in live:
        for q in w.queues:
            per_queue[q] = per_queue.get(q, 0) + 1
    backlog = {q.queue: q.unfinished_jobs for q in queue_stats}
    for q in backlog:
        per_queue.setdefault(q, 0)
    return {
        "workers": {"live": len(live), "stale": max(0, len(every) - len(live)),
                    "total": len(every)},
        "http_workers": sum(1 for w in live if w.agent is not None),
        "capacity_total": capacity,
        "inflight_total": inflight,
        "utilization": inflight / capacity if capacity else 0.0,
        "empty_poll_ratio": empty / polls if polls else 0.0,
        # None: only a worker's configuration names the queue; it has no page (yet).
        "queues": [{"queue": q, "live_workers": n, "unfinished": backlog.get(q)}
                   for q, n in sorted(per_queue.items())],
    }


def store_health(s: Any) -> dict[str, Any]:
    """The store's transaction horizon (the figures /metrics exports), worded: what a
    long-held snapshot is costing, on either engine."""
    h = s.transaction_horizon()
    age = h.oldest_transaction_ms
    return {
        **dataclasses.asdict(h),
        "oldest": present.duration(age, empty="none open"),
        "long": age is not None and age > LONG_TRANSACTION_MS,
        "scope": ("this server's own connections" if h.transactions_seen == "process"
                  else "any session on this database"),
        "wal": None if h.wal_bytes is None else present.byte_size(h.wal_bytes),
        "wal_over": (h.wal_bytes or 0) > (h.wal_limit_bytes or 0),
        "wal_limit": present.byte_size(h.wal_limit_bytes),
    }


@bp.get("/cluster")
def cluster() -> str:
    s = store()
    summary = cluster_summary(s.list_workers(WORKER_STALE_MS), s.list_workers(WORKER_ALL_MS),
                              s.queue_stats())
    return render("cluster.html", page="cluster", title="Cluster", c=summary,
                  health=store_health(s))
