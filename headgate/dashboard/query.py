"""The Jobs page's filters: the `q` search grammar plus the sidebar/queue selectors.

The `q` grammar is the control API's (headgate.core.job_search), parsed here rather than
by calling GET /api/v1/jobs because the page renders server-side in the same process and
reads the store directly (reads need no API round trip); a refused search shows the
API's own message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
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


# Filters a link can set exactly, by parameter: the `q` grammar splits on whitespace, so
# `rate_class:rc one` cannot name a rate class with a space; these parameters can.
# Names follow GET /api/v1/jobs where it has one (kind, partition_key).
EXACT_PARAMS: dict[str, str] = {
    "kind": "kind", "partition_key": "partition_key", "rate_class": "rate_class",
    "fingerprint": "fingerprint",
}
EXACT_LABELS: dict[str, str] = {
    "kind": "kind", "partition_key": "partition", "rate_class": "rate class",
    "fingerprint": "fingerprint",
}

# The time range fields: console parameter -> JobFilter attribute. The form's
# datetime-local inputs send `YYYY-MM-DDTHH:MM[:SS]`, read as UTC like every time the
# console shows; epoch ms (digits) are taken too, so an API bound can be pasted.
TIME_PARAMS: dict[str, str] = {
    "enqueued_after": "enqueued_after_ms", "enqueued_before": "enqueued_before_ms",
    "finished_after": "finished_after_ms", "finished_before": "finished_before_ms",
}
TIME_LABELS: dict[str, str] = {
    "enqueued_after": "enqueued from", "enqueued_before": "enqueued before",
    "finished_after": "finished from", "finished_before": "finished before",
}
EPOCH_MS = re.compile(r"[0-9]{1,15}")

Param = str | list[str]


def parse_time(name: str, raw: str) -> int:
    """Epoch ms of a time range value; InvalidInput in the words the page shows."""
    if EPOCH_MS.fullmatch(raw):
        return int(raw)
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidInput(f"{TIME_LABELS[name]} `{raw}` is not a time "
                           "(YYYY-MM-DDTHH:MM, UTC)") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1000)


def iso_utc(ms: int) -> str:
    """The datetime-local value (UTC, to the second) of epoch ms."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass
class JobQuery:
    """Everything the Jobs URL encodes: it is the shareable state of the page."""

    q: str = ""
    state: str = ""
    queue: str = ""
    cursor: str = ""
    job: str = ""
    error: str = ""
    # Exact values from links (EXACT_PARAMS, and `tag` repeated): names may hold spaces.
    exact: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    # The time range as given (TIME_PARAMS), and as epoch ms once parsed.
    times: dict[str, str] = field(default_factory=dict)
    time_ms: dict[str, int] = field(default_factory=dict)
    filter: JobFilter = field(default_factory=JobFilter)

    @classmethod
    def from_args(cls, args: Any) -> JobQuery:
        query = cls(
            q=(args.get("q") or "").strip(),
            state=(args.get("state") or "").strip(),
            queue=(args.get("queue") or "").strip(),
            cursor=(args.get("cursor") or "").strip(),
            job=(args.get("job") or "").strip(),
            exact={k: args[k] for k in EXACT_PARAMS if args.get(k)},
            tags=[t for t in _all(args, "tag") if t],
            times={k: str(args[k]).strip() for k in TIME_PARAMS if (args.get(k) or "").strip()},
        )
        f = JobFilter(state=query.state or None, queue=query.queue or None,
                      tags_all=list(query.tags))
        for name, value in query.exact.items():
            setattr(f, EXACT_PARAMS[name], value)
        try:
            parse_search(query.q, f)
            for name, raw in query.times.items():
                query.time_ms[name] = parse_time(name, raw)
                setattr(f, TIME_PARAMS[name], query.time_ms[name])
        except InvalidInput as exc:
            query.error = str(exc)
        query.filter = f
        return query

    @property
    def narrowed(self) -> bool:
        """Whether anything narrows the list (an empty list then means "no match")."""
        return bool(self.q or self.state or self.queue or self.exact or self.tags
                    or self.times)

    @property
    def counts_narrowed(self) -> bool:
        """Whether the search narrows more than the sidebar's counters can show (they
        are per queue and state; anything else would mean counting matches)."""
        f = self.filter
        return bool(f.id or f.kind or f.kind_prefix or f.partition_key or f.rate_class
                    or f.fingerprint or f.tags_all or f.tags_any or f.priority is not None
                    or f.error_prefix or f.payload_terms or self.times)

    @staticmethod
    def iso(ms: int) -> str:
        return iso_utc(ms)

    def time_value(self, name: str) -> str:
        """A time range input's value: the parsed time as datetime-local (UTC), or
        what was typed when it did not parse."""
        if name in self.time_ms:
            return iso_utc(self.time_ms[name])
        return self.times.get(name, "")

    def exact_filters(self) -> list[tuple[str, str, str, dict[str, Param]]]:
        """(label, value, parameter, override that removes it) per exact filter."""
        out: list[tuple[str, str, str, dict[str, Param]]] = [
            (EXACT_LABELS[k], v, k, {k: ""}) for k, v in self.exact.items()]
        for i, tag in enumerate(self.tags):
            out.append(("tag", tag, "tag", {"tag": self.tags[:i] + self.tags[i + 1:]}))
        return out

    def params(self, **override: Param) -> dict[str, Param]:
        """URL parameters for a link from this page (empty values dropped)."""
        base: dict[str, Param] = {"q": self.q, "state": self.state, "queue": self.queue}
        base.update({k: self.exact.get(k, "") for k in EXACT_PARAMS})
        base.update({k: self.times.get(k, "") for k in TIME_PARAMS})
        base.update({"tag": list(self.tags), "cursor": self.cursor, "job": self.job})
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
        if f.error_prefix:
            unsupported.append("error")
        if f.payload_terms:
            unsupported.append("payload")
        if self.times:
            unsupported.append("a time range")
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

    def __call__(self, **override: Param) -> str:
        params = self.query.params(**override)
        if not params:
            return self.base
        return f"{self.base}?{urlencode(params, doseq=True, safe=URL_SAFE)}"

    def sheet(self, job_id: str) -> str:
        """This page with the sheet of `job_id` open."""
        return self._sheet_prefix + quote_plus(job_id, safe=URL_SAFE)


def _all(args: Any, name: str) -> list[str]:
    """Every value of a repeated parameter (request args are a MultiDict; a plain
    mapping holds one value)."""
    getlist = getattr(args, "getlist", None)
    if callable(getlist):
        return list(getlist(name))
    value = args.get(name)
    return [value] if value else []
