"""How the console shows audit log entries: a link for the target, one line for the
detail. Entries are the store's records (`Store.list_audit`); nothing here reads more."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import flask

from headgate.core.records import AuditEntry

PAGE_SIZE = 50
# The actions the page's filter offers (any other can still be typed into the URL).
ACTIONS = (
    "job.retry", "job.cancel", "job.delete", "job.promote", "job.reschedule",
    "job.edit_payload", "jobs.retry", "jobs.cancel", "jobs.delete", "bulk.retry",
    "bulk.cancel", "bulk.delete", "queue.pause", "queue.resume", "queue.weight",
    "queue.delete", "enqueue_limit.set", "enqueue_limit.remove", "rate_class.create",
    "rate_class.edit", "rate_class.pause", "rate_class.resume", "rate_class.delete",
    "concurrency_limit.create", "concurrency_limit.edit", "concurrency_limit.delete",
    "schedule.create", "schedule.edit", "schedule.pause", "schedule.resume",
    "schedule.delete", "schedule.run", "quarantine.release", "worker.signal",
    "system.prune", "queues.sample_memory",
)


def target_href(target: str) -> str | None:
    """The console page of what an entry acted on, when it has one."""
    kind, _, name = target.partition(":")
    if not name:
        return None
    url = flask.url_for
    if kind == "job":
        return url("dashboard.jobs", job=name)
    if kind == "queue":
        return url("dashboard.queue", name=name)
    if kind == "rate_class":
        return url("dashboard.rate_classes", edit=name)
    if kind == "concurrency_limit":
        return url("dashboard.concurrency")
    if kind == "schedule":
        return url("dashboard.schedule", schedule_id=name)
    if kind == "fingerprint":
        return url("dashboard.jobs", fingerprint=name)
    return None


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _values(d: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {_show(v)}" for k, v in d.items()
                     if v is not None and k != "before")


def _changes(before: dict[str, Any], after: Mapping[str, Any]) -> str:
    """Only what changed: `limit 20 → 33`."""
    changed = [f"{k} {_show(before.get(k))} → {_show(v)}" for k, v in after.items()
               if k != "before" and before.get(k) != v]
    return ", ".join(changed) or "no change"


def summary(entry: AuditEntry) -> str:
    """One line saying what changed, from the entry's detail."""
    d = entry.detail
    action = entry.action
    if action.startswith("bulk."):
        selector = " ".join(f"{k}={v}" for k, v in (d.get("selector") or {}).items())
        estimate = d.get("total_estimated")
        more = "+" if d.get("total_capped") else ""
        return f"where {selector or 'anything'} · ~{estimate}{more} jobs"
    if action.startswith("jobs."):
        n, failed = d.get("succeeded", 0), d.get("failed", 0)
        text = f"{n} job{'' if n == 1 else 's'}"
        return text + (f", {failed} refused" if failed else "")
    if action == "quarantine.release":
        n = d.get("released_jobs", 0)
        return f"{n} job{'' if n == 1 else 's'} released"
    if isinstance(d.get("before"), dict):
        return _changes(d["before"], d)
    return _values(d)


def rows(entries: list[AuditEntry]) -> list[dict[str, Any]]:
    """What a row of the log shows: the entry's fields, its target's page, a line
    saying what changed, and the bulk operation it started (if any)."""
    return [{**asdict(e), "href": target_href(e.target), "summary": summary(e),
             "operation": e.detail.get("operation_id")} for e in entries]
