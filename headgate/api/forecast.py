"""What-if: `POST /api/v1/simulate` (docs/forecast.md).

A read that needs a body, hence a POST: it changes nothing, so it takes no
Idempotency-Key, is allowed in read-only mode and for read-only tokens, and is not
audited (blueprint.READ_POSTS).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import flask

from headgate.core.forecast import MAX_LIMIT, MAX_SLOTS, Change
from headgate.services.forecasting import Forecaster

from .blueprint import bp, json_response
from .context import store
from .errors import ApiError
from .params import Field, json_body, opt, req

RATE_FIELDS = (req("name", "str"), opt("limit", "i64"), opt("window_ms", "i64"),
               opt("burst", "i64"))
CEILING_FIELDS = (req("name", "str"), req("max_concurrent", "i64"))
QUEUE_FIELDS = (req("name", "str"), req("weight", "i64"))
SLOT_FIELDS = (req("add", "i64"), opt("queues", "str_list"))
SECTIONS = ("rate_class", "concurrency_limit", "queue", "worker_slots")
MAX_WINDOW_MS = 2**62


def _section(name: str, fields: tuple[Field, ...]) -> Field:
    return Field(name, "object", nullable=True, fields=fields)


def _bounded(what: str, value: int | None, high: int) -> int | None:
    if value is not None and not 1 <= value <= high:
        raise ApiError(400, f"{what} must be between 1 and {high}")
    return value


@bp.post("/simulate")
def simulate() -> flask.Response:
    """Before and after a candidate change, for the current backlog."""
    b = json_body(_section("rate_class", RATE_FIELDS),
                  _section("concurrency_limit", CEILING_FIELDS),
                  _section("queue", QUEUE_FIELDS), _section("worker_slots", SLOT_FIELDS))
    if all(b[s] is None for s in SECTIONS):
        raise ApiError(400, "name a change: rate_class, concurrency_limit, queue or "
                       "worker_slots")
    f = Forecaster(store())
    change = Change()
    echo: dict[str, Any] = {}
    if (rc := b["rate_class"]) is not None:
        if rc["name"] not in f.rate_inputs():
            raise ApiError(400, f"unknown rate class `{rc['name']}`")
        if rc["limit"] is None and rc["window_ms"] is None and rc["burst"] is None:
            raise ApiError(400, "rate_class needs limit, window_ms or burst")
        change = Change(rate_class=rc["name"], limit=_bounded("limit", rc["limit"], MAX_LIMIT),
                        window_ms=_bounded("window_ms", rc["window_ms"], MAX_WINDOW_MS),
                        burst=_bounded("burst", rc["burst"], MAX_LIMIT))
        echo["rate_class"] = rc
    if (cl := b["concurrency_limit"]) is not None:
        limit = f.limit(cl["name"])
        if limit is None:
            raise ApiError(400, f"unknown concurrency limit `{cl['name']}`")
        wanted = _bounded("max_concurrent", cl["max_concurrent"], MAX_LIMIT)
        assert wanted is not None
        change = _with(change, concurrency_limit_queue=limit.queue,
                       max_concurrent=f.ceiling_with(limit.queue, cl["name"], wanted))
        echo["concurrency_limit"] = {**cl, "queue": limit.queue}
    known = {q.queue for q in store().queue_stats()}
    if (qw := b["queue"]) is not None:
        if qw["name"] not in known:
            raise ApiError(400, f"unknown queue `{qw['name']}`")
        change = _with(change, queue=qw["name"],
                       weight=_bounded("weight", qw["weight"], 2**32 - 1))
        echo["queue"] = qw
    if (ws := b["worker_slots"]) is not None:
        _bounded("add", ws["add"], MAX_SLOTS)
        queues = ws["queues"] if ws["queues"] else f.backlog_queues()
        for name in queues:
            if name not in known:
                raise ApiError(400, f"unknown queue `{name}`")
        change = _with(change, more_slots=ws["add"], slots_queues=tuple(sorted(set(queues))))
        echo["worker_slots"] = {"add": ws["add"], "queues": sorted(set(queues))}
    result = f.simulate(change)
    return json_response({
        "change": echo,
        "queues": result.queues,
        "before": {"time_to_drain": result.before.as_dict()},
        "after": {"time_to_drain": result.after.as_dict()},
    })


def _with(change: Change, **fields: Any) -> Change:
    return replace(change, **fields)
