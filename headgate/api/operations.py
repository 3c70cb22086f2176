"""Bulk operations: POST /jobs/bulk and GET /operations/{id}.

The store records an operation and executes it in bounded batches. Where no duty
runner owns that, the app's `OperationsRunner` (`headgate/services/duties.py`) does; a route
that creates an operation wakes it, so the work starts at once.
"""

from __future__ import annotations

from typing import Any

import flask

from headgate.core.records import Operation

from .blueprint import bp, json_response
from .context import api_state, store
from .errors import ApiError
from .params import dflt, json_body, opt, req

SELECTOR_FIELDS = (
    opt("queue", "str"),
    opt("state", "str"),
    opt("kind", "str"),
    opt("partition_key", "str"),
    opt("older_than_ms", "i64"),
)


def operation_json(op: Operation) -> dict[str, Any]:
    """The operation body (id, status, affected, total_estimated, dry_run,
    error) plus what the dashboard shows beside it."""
    return {
        "id": op.id,
        "status": op.status,
        "affected": op.affected,
        "total_estimated": op.total_estimated,
        "dry_run": op.dry_run,
        "error": op.error,
        "action": op.action,
        "selector": dict(op.selector),
        "total_capped": op.total_capped,
        "created_at_ms": op.created_at_ms,
        "finished_at_ms": op.finished_at_ms,
    }


@bp.post("/jobs/bulk")
def bulk() -> flask.Response:
    b = json_body(
        req("action", "str"),
        req("selector", "object", SELECTOR_FIELDS),
        dflt("dry_run", "bool", False),
    )
    if b["action"] == "archive":
        # The transition table has no operator_archive row.
        raise ApiError(400, "operator_archive is not in the transition table")
    selector = {k: v for k, v in b["selector"].items() if v is not None}
    op = store().create_operation(b["action"], selector, b["dry_run"])
    if not op.dry_run:
        wake_runner()
    return json_response(operation_json(op), 202)


@bp.get("/operations/<segment:op_id>")
def get_operation(op_id: str) -> flask.Response:
    op = store().get_operation(op_id)
    if op is None:
        raise ApiError(404, "no such operation")
    return json_response(operation_json(op))


def wake_runner() -> None:
    runner = api_state().runner
    if runner is not None:
        runner.wake()
