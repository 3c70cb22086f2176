"""The job search grammar, one for the control API's `q` parameter and the console's
search box, so both accept the same searches and refuse the rest in the same words
(docs/api.md, Search `q`): space-separated `field:value` terms, ANDed; a bare term matches
kind by prefix."""

from __future__ import annotations

import re

from .errors import InvalidInput
from .job import JobFilter

# `field:value` terms that set one JobFilter attribute to the value as written.
TEXT_FIELDS = {
    "id": "id", "queue": "queue", "state": "state", "kind": "kind",
    "partition": "partition_key", "rate_class": "rate_class", "fingerprint": "fingerprint",
}

# Not \d: that matches any script's digits.
PLAIN_INTEGER = re.compile(r"[+-]?[0-9]+")
I32_DIGITS = 10


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
        elif name == "error":
            # The last error's first line starts with it ("error:Timeout" finds
            # "TimeoutError: …"); case as written, served by jobs_last_error_id.
            if not value:
                raise InvalidInput("error: needs the start of an error, e.g. error:Timeout")
            f.error_prefix = value
        else:
            raise InvalidInput(f"unknown search field `{name}`")


def _priority(value: str) -> int:
    """A plain 32-bit decimal: an optional sign, ASCII digits, nothing else.

    Python's int() also takes `1_0`, surrounding space and any script's digits, which
    would let odd spellings through as numbers (and a larger number overflowed SQLite:
    a 500).
    """
    if not PLAIN_INTEGER.fullmatch(value):
        raise InvalidInput(f"priority `{value}` is not a number")
    # Leading zeros are fine, and int() refuses a string over 4300 digits: drop them.
    sign = "-" if value.startswith("-") else ""
    digits = value.lstrip("+-").lstrip("0") or "0"
    if len(digits) > I32_DIGITS or not -(2**31) <= int(sign + digits) < 2**31:
        raise InvalidInput(f"priority `{value}` is not a number")
    return int(sign + digits)
