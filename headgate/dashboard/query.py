"""The Jobs page's filters: the `q` search grammar plus the sidebar/queue selectors.

The `q` grammar is the control API's (headgate.core.job_search), parsed here rather than
by calling GET /api/v1/jobs because the page renders server-side in the same process and
reads the store directly (reads need no API round trip); a refused search shows the
API's own message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus, urlencode

from headgate.core import InvalidInput, JobFilter
from headgate.core.job_search import parse_search

# The characters url_for leaves unescaped in query values (werkzeug's set), so links
# built by `JobQuery.links` are the very URLs url_for builds.
URL_SAFE = "!$'()*,/:;?@"
# What POST /api/v1/jobs/bulk can select by; a filter using anything else cannot be
# turned into a bulk operation without widening it, so the console refuses.
BULK_FIELDS: frozenset[str] = frozenset({"queue", "state", "kind", "partition_key"})


@dataclass
class JobQuery:
    """Everything the Jobs URL encodes: it is the shareable state of the page."""

    q: str = ""
    state: str = ""
    queue: str = ""
    cursor: str = ""
    job: str = ""
    error: str = ""
    filter: JobFilter = field(default_factory=JobFilter)

    @classmethod
    def from_args(cls, args: Any) -> JobQuery:
        query = cls(
            q=(args.get("q") or "").strip(),
            state=(args.get("state") or "").strip(),
            queue=(args.get("queue") or "").strip(),
            cursor=(args.get("cursor") or "").strip(),
            job=(args.get("job") or "").strip(),
        )
        f = JobFilter(state=query.state or None, queue=query.queue or None)
        try:
            parse_search(query.q, f)
        except InvalidInput as exc:
            query.error = str(exc)
        query.filter = f
        return query

    def params(self, **override: str) -> dict[str, str]:
        """URL parameters for a link from this page (empty values dropped)."""
        base = {"q": self.q, "state": self.state, "queue": self.queue,
                "cursor": self.cursor, "job": self.job}
        base.update(override)
        return {k: v for k, v in base.items() if v}

    def links(self, base: str) -> JobLinks:
        return JobLinks(self, base)

    def bulk_selector(self) -> tuple[dict[str, Any] | None, str]:
        """The bulk selector for the current filter, or (None, why not)."""
        f = self.filter
        unsupported = []
        if f.id:
            unsupported.append("id")
        if f.rate_class:
            unsupported.append("rate_class")
        if f.fingerprint:
            unsupported.append("fingerprint")
        if f.tags_all or f.tags_any:
            unsupported.append("tags")
        if f.priority is not None:
            unsupported.append("priority")
        if f.kind_prefix:
            unsupported.append("kind prefix (use kind:NAME)")
        if unsupported:
            return None, ("Bulk actions select by queue, state, kind and partition only; "
                          "this filter also uses " + ", ".join(unsupported) + ".")
        selector = {k: v for k, v in (
            ("queue", f.queue), ("state", f.state), ("kind", f.kind),
            ("partition_key", f.partition_key)) if v}
        if not selector:
            return None, "Pick a state or queue first: a bulk action needs a filter."
        return selector, ""


class JobLinks:
    """Links from a Jobs page (at `base`) to itself with some of its parameters changed,
    exactly as url_for builds them but without a route lookup each: a page holds a
    hundred (two per job row), and the lookups were a fifth of its time."""

    def __init__(self, query: JobQuery, base: str) -> None:
        self.query = query
        self.base = base
        kept = query.params(job="")
        # `job` is the last parameter, so a row's link is this prefix and its id.
        self._sheet_prefix = f"{self(job='')}{'&' if kept else '?'}job="

    def __call__(self, **override: str) -> str:
        params = self.query.params(**override)
        return f"{self.base}?{urlencode(params, safe=URL_SAFE)}" if params else self.base

    def sheet(self, job_id: str) -> str:
        """This page with the sheet of `job_id` open."""
        return self._sheet_prefix + quote_plus(job_id, safe=URL_SAFE)
