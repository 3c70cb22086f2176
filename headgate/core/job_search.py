"""The job search grammar, one for the control API's `q` parameter and the console's
search box, so both accept the same searches and refuse the rest in the same words
(docs/api.md, Search `q`): space-separated `field:value` terms, ANDed; a bare term matches
kind by prefix. `payload:` terms are checked on decoded payloads by the store, within
its scan bound (adapters/shared/job_pages.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

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
# Each payload term is checked against every job scanned: a handful is plenty.
MAX_PAYLOAD_TERMS = 8


@dataclass(frozen=True, slots=True)
class PayloadTerm:
    """`payload:TEXT` (path empty): the decoded payload contains TEXT, ignoring case.
    `payload.a.b:VALUE`: the JSON value at a.b is VALUE (a string as written, any
    other scalar as JSON spells it: `42`, `true`, `null`; a list holds it)."""

    path: tuple[str, ...]
    value: str

    def matches(self, doc: Any, text: str) -> bool:
        if not self.path:
            return self.value.casefold() in text.casefold()
        node = doc
        for step in self.path:
            if isinstance(node, dict) and step in node:
                node = node[step]
            elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
                node = node[int(step)]
            else:
                return False
        items = node if isinstance(node, list) else [node]
        return any(_scalar_text(item) == self.value for item in items)


def _scalar_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return None
    return json.dumps(value)


def decoded_payload(payload: bytes | None) -> tuple[Any, str]:
    """(JSON document or None, its text): the text is the document re-serialized
    without escapes, so `payload:é` finds a payload stored as "\\u00e9"; a payload
    that is not JSON is searched as UTF-8 text."""
    raw = (payload or b"").decode("utf-8", "replace")
    try:
        doc = json.loads(raw)
    except ValueError:
        return None, raw
    return doc, json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def payload_matches(payload: bytes | None, terms: list[PayloadTerm]) -> bool:
    doc, text = decoded_payload(payload)
    return all(term.matches(doc, text) for term in terms)


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
        elif name == "payload" or name.startswith("payload."):
            f.payload_terms.append(_payload_term(name, value))
        else:
            raise InvalidInput(f"unknown search field `{name}`")
    if len(f.payload_terms) > MAX_PAYLOAD_TERMS:
        raise InvalidInput(f"at most {MAX_PAYLOAD_TERMS} payload terms in a search")


def _payload_term(name: str, value: str) -> PayloadTerm:
    path = tuple(name.split(".")[1:])
    if not value:
        raise InvalidInput(f"{name}: needs a value, e.g. payload:alice or payload.to:alice")
    if any(not step for step in path):
        raise InvalidInput(f"`{name}` is not a payload path (payload.KEY.KEY:VALUE)")
    return PayloadTerm(path, value)


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
