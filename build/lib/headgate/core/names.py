"""The one rule for naming a rate class or a concurrency limit, shared by the control
API (PUT refuses other names with a 400) and the console's forms (the same pattern in
the browser, so a bad name is caught before it is sent).

Why a rule at all: these names appear in URLs, Prometheus labels, log lines and the
job search (`rate_class:NAME` splits on whitespace), so spaces, quotes and markup in
them only ever cause trouble. `/` stays allowed (`tier/gold` was accepted before and
the API routes encode it). Deleting is not checked: a name stored before the rule can
still be removed.
"""

from __future__ import annotations

import re

from .errors import InvalidInput

MAX_LEN = 128
_TAIL = "{0," + str(MAX_LEN - 1) + "}"
POLICY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]" + _TAIL)
# The same rule for an HTML `pattern` attribute (compiled with the `v` flag, where `/`
# and `-` in a class must be escaped).
POLICY_NAME_HTML = r"[A-Za-z0-9][A-Za-z0-9._:\/@+\-]" + _TAIL
RULE = (f"1 to {MAX_LEN} characters: letters, digits and . _ - : / @ +, starting with a "
        "letter or digit")


def check_policy_name(what: str, name: str) -> str:
    """`name` if the rule allows it, else InvalidInput saying the rule."""
    if not isinstance(name, str) or not POLICY_NAME.fullmatch(name):
        raise InvalidInput(f"{what} name is not allowed: use {RULE}")
    return name
