"""The job search grammar, one for the control API's `q` parameter and the console's
search box, so both accept the same searches and refuse the rest in the same words
(the seed's `parse_q`): space-separated `field:value` terms, ANDed; a bare term matches
kind by prefix."""

from __future__ import annotations

from .errors import InvalidInput
from .job import JobFilter

# `field:value` terms that set one JobFilter attribute to the value as written.
TEXT_FIELDS = {
    "id": "id", "queue": "queue", "state": "state", "kind": "kind",
    "partition": "partition_key", "rate_class": "rate_class", "fingerprint": "fingerprint",
}


def parse_search(q: str, f: JobFilter) -> None:
    """Narrow `f` by each term of `q`; InvalidInput names the first term refused."""
    for term in q.split():
        name, sep, value = term.partition(":")
        if not sep:
            f.kind_prefix = term
        elif name in TEXT_FIELDS:
            setattr(f, TEXT_FIELDS[name], value)
        elif name == "tag":
            f.tags_all.append(value)
        elif name == "tag_any":
            f.tags_any.append(value)
        elif name == "priority":
            f.priority = _priority(value)
        else:
            raise InvalidInput(f"unknown search field `{name}`")


def _priority(value: str) -> int:
    """A plain 32-bit integer (a larger one overflowed SQLite: a 500)."""
    try:
        if not value.strip() or value != value.strip():
            raise ValueError
        priority = int(value)
    except ValueError:
        raise InvalidInput(f"priority `{value}` is not a number") from None
    if not -(2**31) <= priority < 2**31:
        raise InvalidInput(f"priority `{value}` is not a number")
    return priority
