"""Bulk operations: POST /jobs/bulk, GET /operations/{id}, and the interim runner.

The store records an operation and executes it in bounded batches
(`store.run_operations_batch`). Until the APScheduler duty runner owns that call, a
daemon thread per API process drives it: it sleeps while there is nothing to do, is
woken when this process creates an operation, and polls once a second otherwise so an
operation created by another process (or left by a restart) still finishes.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import flask

from headgate.core import StoreUnavailable
from headgate.store.port import Store

from .blueprint import bp, json_response
from .context import api_state, store
from .errors import ApiError
from .params import dflt, json_body, opt, req

log = logging.getLogger("headgate.api")

BATCH = 500
IDLE_POLL_S = 1.0
ERROR_BACKOFF_S = 2.0

SELECTOR_FIELDS = (
    opt("queue", "str"),
    opt("state", "str"),
    opt("kind", "str"),
    opt("partition_key", "str"),
    opt("older_than_ms", "i64"),
)


def operation_json(op: dict[str, Any]) -> dict[str, Any]:
    """The operation body (id, status, affected, total_estimated, dry_run,
    error) plus what the dashboard shows beside it."""
    return {
        "id": op["id"],
        "status": op["status"],
        "affected": op["affected"],
        "total_estimated": op["total_estimated"],
        "dry_run": op["dry_run"],
        "error": op["error"],
        "action": op["action"],
        "selector": op["selector"],
        "total_capped": op["total_capped"],
        "created_at_ms": op["created_at_ms"],
        "finished_at_ms": op["finished_at_ms"],
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
    if not op["dry_run"]:
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


class OperationsRunner:
    """Calls `store.run_operations_batch()` until there is nothing left, then waits."""

    def __init__(self, store: Store, batch: int = BATCH) -> None:
        self.store = store
        self.batch = batch
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="headgate-operations", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                did = self.store.run_operations_batch(self.batch)
            except StoreUnavailable as exc:
                log.warning("operations runner: %s", exc)
                self._stop.wait(ERROR_BACKOFF_S)
                continue
            except Exception:  # noqa: BLE001 - keep the runner alive; the op records it
                log.exception("operations runner failed a batch")
                self._stop.wait(ERROR_BACKOFF_S)
                continue
            if did:
                continue
            self._wake.wait(IDLE_POLL_S)
            self._wake.clear()
