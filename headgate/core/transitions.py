"""The transition function, built from `transitions.json` at import.

The table is data so the lifecycle can be read (and tested) without reading code; the
only code here evaluates the named guards.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

from .errors import InvalidTransition
from .states import State

DEFAULT_CRASH_LIMIT = 3


@dataclass(frozen=True, slots=True)
class GuardContext:
    attempt: int = 0
    max_attempts: int = 25
    crash_attempt: int = 0
    crash_limit: int = DEFAULT_CRASH_LIMIT
    retention_ms: int = 1
    now_ms: int = 0
    scheduled_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class Row:
    source: State
    event: str
    target: State
    guard: str
    effects: frozenset[str]


GUARDS: dict[str, Callable[[GuardContext], bool]] = {
    "always": lambda c: True,
    "due": lambda c: c.now_ms >= c.scheduled_at_ms,
    "retention_positive": lambda c: c.retention_ms > 0,
    "retention_zero": lambda c: c.retention_ms == 0,
    "attempts_left": lambda c: c.attempt + 1 < c.max_attempts,
    "attempts_exhausted": lambda c: c.attempt + 1 >= c.max_attempts,
    "crash_budget_left": lambda c: c.crash_attempt + 1 < c.crash_limit,
    "crash_budget_exhausted": lambda c: c.crash_attempt + 1 >= c.crash_limit,
}

# A resource, not a path beside this file: a zipped package has no such path.
TABLE = files(__package__).joinpath("transitions.json")


def load_rows(table: Traversable = TABLE) -> tuple[Row, ...]:
    data = json.loads(table.read_text(encoding="utf-8"))
    rows = []
    for raw in data["transitions"]:
        if raw["guard"] not in GUARDS:
            raise ValueError(f"transition table names unknown guard {raw['guard']!r}")
        rows.append(
            Row(
                State(raw["from"]),
                raw["on"],
                State(raw["to"]),
                raw["guard"],
                frozenset(raw["effects"]),
            )
        )
    return tuple(rows)


ROWS: tuple[Row, ...] = load_rows()
_BY_KEY: dict[tuple[State, str], tuple[Row, ...]] = {}
for _row in ROWS:
    _BY_KEY[(_row.source, _row.event)] = (*_BY_KEY.get((_row.source, _row.event), ()), _row)

EVENTS: frozenset[str] = frozenset(r.event for r in ROWS)


def transition(state: State | str, event: str, ctx: GuardContext | None = None) -> Row:
    """The row that applies to `event` in `state`, or InvalidTransition."""
    ctx = ctx or GuardContext()
    for row in _BY_KEY.get((State(state), event), ()):
        if GUARDS[row.guard](ctx):
            return row
    raise InvalidTransition(f"cannot {event.replace('_', ' ')} a job in state {state}")


def sources_of(event: str) -> frozenset[State]:
    """States from which `event` is defined: the SQL filters of operator actions use it."""
    return frozenset(r.source for r in ROWS if r.event == event)
