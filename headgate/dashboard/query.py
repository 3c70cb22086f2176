"""The Jobs page's filters: the `q` search grammar plus the sidebar/queue selectors.

The grammar is the control API's (seed `parse_q`): space-separated `field:value` terms,
ANDed; a bare term matches kind by prefix. It is parsed here rather than by calling
GET /api/v1/jobs because the page renders server-side in the same process and reads the
store directly (reads need no API round trip); the error messages are the API's, word
for word, so the console says what the API would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus, urlencode

from headgate.core import JobFilter

FIELDS: tuple[str, ...] = (
    "id", "queue", "state", "kind", "partition", "rate_class", "fingerprint", "tag",
    "tag_any", "priority",
)
# The characters url_for leaves unescaped in query values (werkzeug's set), so links
# built by `JobQuery.links` are the very URLs url_for builds.
URL_SAFE = "!$'()*,/:;?@"
# What POST /api/v1/jobs/bulk can select by; a filter using anything else cannot be
# turned into a bulk operation without widening it, so the console refuses.
BULK_FIELDS: frozenset[str] = frozenset({"queue", "state", "kind", "partition_key"})


class QueryError(ValueError):
    """A `q` the API would answer with 400; the message is the API's."""


def parse_q(q: str, f: JobFilter) -> None:
    for term in q.split():
        name, sep, value = term.partition(":")
        if not sep:
            f.kind_prefix = term
            continue
        if name == "id":
            f.id = value
        elif name == "queue":
            f.queue = value
        elif name == "state":
            f.state = value
        elif name == "kind":
            f.kind = value
        elif name == "partition":
            f.partition_key = value
        elif name == "rate_class":
            f.rate_class = value
        elif name == "fingerprint":
            f.fingerprint = value
        elif name == "tag":
            f.tags_all.append(value)
        elif name == "tag_any":
            f.tags_any.append(value)
        elif name == "priority":
            # The API's rule exactly: a plain i32 (a bigger one overflowed SQLite: a 500).
            try:
                if not value.strip() or value != value.strip():
                    raise ValueError
                f.priority = int(value)
                if not -(2**31) <= f.priority < 2**31:
                    raise ValueError
            except ValueError:
                raise QueryError(f"priority `{value}` is not a number") from None
        else:
            raise QueryError(f"unknown search field `{name}`")


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
            parse_q(query.q, f)
        except QueryError as exc:
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
