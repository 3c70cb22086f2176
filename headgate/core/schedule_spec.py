"""Periodic schedule specs: parsing and tick arithmetic, pure and clock-free.

Grammar::

    @every:<ms>                       epoch-aligned UTC ticks at k * ms (ms >= 1)
    [CRON_TZ=<IANA zone> ]<cron>      5 fields (minute hour dom month dow, minute precision)
                                      or 6 fields (second first)

Cron fields accept ``*``, numbers, names (JAN..DEC, SUN..SAT; 0 and 7 are Sunday),
lists ``a,b``, ranges ``a-b``, steps ``*/n``, ``a-b/n`` and ``a/n`` (= ``a-max/n``).
When both day-of-month and day-of-week are restricted (neither starts with ``*``, as in
Vixie cron) a day matches if EITHER matches; otherwise both must (the ``*`` one always
does).

A cron spec is evaluated in the zone's local calendar (UTC without ``CRON_TZ``): a
local time that does not exist (spring forward) never fires, and a local time that
occurs twice (fall back) fires once, at its first occurrence. Every wall-clock time maps
to at most one instant and that map is increasing, so the search walks local wall-clock
time field by field (jumping whole months, days, hours, minutes) and converts each
candidate back to an instant, never testing second by second. The days a month offers
depend only on its length and the weekday of its 1st, so they are tabled at parse time
and a month without one is skipped whole: a search across centuries stays cheap.

Instants are integer milliseconds since the epoch; cron ticks fall on whole seconds.
"""

from __future__ import annotations

import calendar
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import InvalidInput

__all__ = ["next_after", "ticks_between", "validate"]

MAX_EVERY_MS = 100 * 365 * 86_400_000
# The Gregorian calendar repeats every 400 years, so a day pattern that matches at all
# matches within any 401 consecutive years (e.g. Feb 29 on a Sunday: 2032, then 2060).
_SEARCH_YEARS = 401
_MIN_YEAR, _MAX_YEAR = 1971, 9998

_MONTHS = {m: i for i, m in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1)}
_DAYS = {d: i for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
_DAYS_IN_MONTH_MAX = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_EVERY = re.compile(r"@every:([0-9]+)")
# ASCII only: str.isdigit() and int() also take '²' or '١', which are not cron.
_DIGITS = re.compile(r"[0-9]+")
_ONE_SECOND = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DOM = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTHS)
_DOW = _Field("day-of-week", 0, 7, _DAYS)


@dataclass(frozen=True, slots=True)
class _Cron:
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    doms: frozenset[int]
    months: tuple[int, ...]
    dows: frozenset[int]  # 0 = Sunday
    dom_star: bool
    dow_star: bool
    zone: ZoneInfo | None
    # Matching days of a month, by _month_key(its length, weekday of its 1st).
    month_days: tuple[tuple[int, ...], ...]

    def days_of(self, year: int, month: int) -> tuple[int, ...]:
        first, length = calendar.monthrange(year, month)
        return self.month_days[_month_key(length, first)]

    def day_matches(self, day: datetime) -> bool:
        dom_ok = day.day in self.doms
        dow_ok = (day.weekday() + 1) % 7 in self.dows
        if self.dom_star or self.dow_star:
            return dom_ok and dow_ok
        return dom_ok or dow_ok


@dataclass(frozen=True, slots=True)
class _Every:
    interval_ms: int


# -- parsing ------------------------------------------------------------------------


def validate(spec: str) -> None:
    """Raise InvalidInput naming the problem when `spec` is not a valid schedule."""
    _parse(spec)


@lru_cache(maxsize=512)
def _parse(spec: str) -> _Cron | _Every:
    if not isinstance(spec, str):
        raise InvalidInput("spec must be a string")
    text = spec.strip()
    if not text:
        raise InvalidInput("spec must not be empty")
    zone: ZoneInfo | None = None
    if text.startswith("CRON_TZ="):
        prefix, _, text = text.partition(" ")
        zone = _zone(prefix.removeprefix("CRON_TZ="))
        text = text.strip()
        if text.startswith("@"):
            raise InvalidInput(
                "CRON_TZ= applies only to cron expressions; @every is always UTC"
            )
    if text.startswith("@"):
        match = _EVERY.fullmatch(text)
        if match is None:
            raise InvalidInput(
                f"unknown spec {text!r}: expected @every:<ms> or a 5- or 6-field cron"
            )
        interval = int(match.group(1))
        if interval < 1:
            raise InvalidInput("@every interval must be >= 1 ms")
        if interval > MAX_EVERY_MS:
            raise InvalidInput(f"@every interval must be <= {MAX_EVERY_MS} ms")
        return _Every(interval)
    fields = text.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    elif len(fields) != 6:
        raise InvalidInput(
            f"cron spec must have 5 fields (minute precision) or 6 (seconds first), "
            f"got {len(fields)}"
        )
    sec, minute, hour, dom, month, dow = fields
    doms = frozenset(_values(dom, _DOM))
    dows = frozenset(d % 7 for d in _values(dow, _DOW))
    dom_star, dow_star = dom.startswith("*"), dow.startswith("*")
    cron = _Cron(
        seconds=tuple(sorted(_values(sec, _SECOND))),
        minutes=tuple(sorted(_values(minute, _MINUTE))),
        hours=tuple(sorted(_values(hour, _HOUR))),
        doms=doms,
        months=tuple(sorted(_values(month, _MONTH))),
        dows=dows,
        dom_star=dom_star,
        dow_star=dow_star,
        zone=zone,
        month_days=_month_table(doms, dows, dom_star or dow_star),
    )
    # Every month length occurs with its 1st on every weekday within 400 years, so a
    # spec whose months offer no day in any of those layouts can never fire.
    if not any(
        cron.month_days[_month_key(length, first)]
        for m in cron.months for length in _LENGTHS[m - 1] for first in range(7)
    ):
        raise InvalidInput(
            f"cron spec never fires: day-of-month {dom!r} does not occur in month {month!r}"
        )
    return cron


_LENGTHS = tuple((28, 29) if m == 2 else (_DAYS_IN_MONTH_MAX[m - 1],) for m in range(1, 13))


def _month_key(length: int, first_weekday: int) -> int:
    """Index into _Cron.month_days; `first_weekday` counts from Monday = 0."""
    return (length - 28) * 7 + first_weekday


def _month_table(
    doms: frozenset[int], dows: frozenset[int], both: bool
) -> tuple[tuple[int, ...], ...]:
    table = []
    for length in range(28, 32):
        for first in range(7):
            days = []
            for day in range(1, length + 1):
                dom_ok = day in doms
                dow_ok = (first + day) % 7 in dows  # Sunday = 0
                if (dom_ok and dow_ok) if both else (dom_ok or dow_ok):
                    days.append(day)
            table.append(tuple(days))
    return tuple(table)


def _zone(name: str) -> ZoneInfo:
    if not name:
        raise InvalidInput("CRON_TZ= needs an IANA time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput(f"unknown time zone in CRON_TZ: {name!r}") from None


def _values(text: str, field: _Field) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise InvalidInput(f"empty list item in {field.name} field {text!r}")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not _DIGITS.fullmatch(step_text) or int(step_text) < 1:
                raise InvalidInput(
                    f"bad step {step_text!r} in {field.name} field: must be an integer >= 1"
                )
            step = int(step_text)
        if base == "*":
            low, high = field.low, field.high
            if field is _DOW:
                high = 6  # `*/2` over the week must not count Sunday twice
        elif "-" in base:
            a, _, b = base.partition("-")
            low, high = _number(a, field), _number(b, field)
            if field is _DOW and high == 0 and low > 0:
                high = 7  # `SAT-SUN`, `5-0`: Sunday closes the week as well as opening it
            if low > high:
                raise InvalidInput(
                    f"bad range {base!r} in {field.name} field: start is after end"
                )
        else:
            low = _number(base, field)
            high = field.high if slash else low
        out.update(range(low, high + 1, step))
    return out


def _number(text: str, field: _Field) -> int:
    if field.names and text.isascii() and text.upper() in field.names:
        return field.names[text.upper()]
    if not _DIGITS.fullmatch(text):
        raise InvalidInput(f"bad value {text!r} in {field.name} field")
    value = int(text)
    if not field.low <= value <= field.high:
        raise InvalidInput(
            f"{field.name} value {value} out of range {field.low}-{field.high}"
        )
    return value


# -- evaluation ---------------------------------------------------------------------


def next_after(spec: str, after_ms: int) -> int:
    """The first tick strictly after `after_ms`."""
    rule = _parse(spec)
    if isinstance(rule, _Every):
        return (after_ms // rule.interval_ms + 1) * rule.interval_ms
    tick = _cron_next(rule, after_ms)
    if tick is None:
        raise InvalidInput(f"spec {spec!r} has no tick after {after_ms}")
    return tick


def ticks_between(spec: str, after_ms: int, until_ms: int, limit: int) -> list[int]:
    """Ticks in (after_ms, until_ms], oldest first; only the most recent `limit` when
    there are more. Walks backwards from `until_ms`, so a long outage costs `limit`
    steps, not one step per missed tick."""
    if limit <= 0 or until_ms <= after_ms:
        return []
    rule = _parse(spec)
    if isinstance(rule, _Every):
        step = rule.interval_ms
        last = until_ms // step * step
        first = max(after_ms // step + 1, last // step - limit + 1) * step
        return list(range(first, last + 1, step))
    out: list[int] = []
    tick = _cron_prev(rule, until_ms, after_ms)
    while tick is not None and tick > after_ms and len(out) < limit:
        out.append(tick)
        tick = _cron_prev(rule, tick - 1, after_ms)
    out.reverse()
    return out


def _instant(rule: _Cron, wall: datetime) -> int | None:
    """Epoch ms of a naive local wall time: None if it does not exist there, the first
    occurrence if it exists twice."""
    if rule.zone is None:
        return int(wall.replace(tzinfo=UTC).timestamp()) * 1000
    aware = wall.replace(tzinfo=rule.zone, fold=0)
    seconds = int(aware.timestamp())
    back = datetime.fromtimestamp(seconds, rule.zone).replace(tzinfo=None, fold=0)
    if back != wall:
        return None  # in a spring-forward gap
    return seconds * 1000


def _wall(rule: _Cron, seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, rule.zone or UTC)


def _cron_next(rule: _Cron, after_ms: int) -> int | None:
    start = after_ms // 1000 + 1
    wall = _wall(rule, start).replace(tzinfo=None, fold=0)
    limit = wall.year + _SEARCH_YEARS
    while True:
        found = _match_forward(rule, wall, limit)
        if found is None:
            return None
        tick = _instant(rule, found)
        # A wall time inside a repeated hour already fired at its first occurrence,
        # before `after_ms`: keep looking.
        if tick is not None and tick > after_ms:
            return tick
        wall = found + _ONE_SECOND


def _cron_prev(rule: _Cron, until_ms: int, floor_ms: int) -> int | None:
    """The last tick at or before `until_ms`; None if there is none after `floor_ms`
    (searching further back would only find ticks the caller discards)."""
    seconds = until_ms // 1000
    aware = _wall(rule, seconds)
    wall = aware.replace(tzinfo=None, fold=0)
    if aware.fold == 1:
        # During the second pass of a repeated hour, later wall times of that hour
        # already happened (first occurrence), so start the search from them.
        first = aware.replace(fold=0).utcoffset()
        second = aware.utcoffset()
        if first is not None and second is not None and first > second:
            wall += first - second
    # A year of slack: the floor's local year may differ from its UTC year.
    limit = max(wall.year - _SEARCH_YEARS, _wall(rule, max(floor_ms, 0) // 1000).year - 1)
    while True:
        found = _match_backward(rule, wall, limit)
        if found is None:
            return None
        tick = _instant(rule, found)
        if tick is not None and tick <= until_ms:
            return tick
        wall = found - _ONE_SECOND


def _first_at_least(values: tuple[int, ...], value: int) -> int | None:
    i = bisect_left(values, value)
    return values[i] if i < len(values) else None


def _last_at_most(values: tuple[int, ...], value: int) -> int | None:
    i = bisect_right(values, value)
    return values[i - 1] if i else None


def _month_start(year: int, month: int) -> datetime:
    return datetime(year, month, 1)


def _match_forward(rule: _Cron, wall: datetime, limit_year: int) -> datetime | None:
    """Smallest naive wall time >= `wall` matching every field."""
    t = wall
    while t.year <= min(limit_year, _MAX_YEAR):
        month = _first_at_least(rule.months, t.month)
        if month is None:
            t = _month_start(t.year + 1, rule.months[0])
            continue
        if month != t.month:
            t = _month_start(t.year, month)
        day = _first_at_least(rule.days_of(t.year, t.month), t.day)
        if day is None:
            t = _end_of_month(_month_start(t.year, t.month)) + _ONE_SECOND
            continue
        if day != t.day:
            t = datetime(t.year, t.month, day)
        hour = _first_at_least(rule.hours, t.hour)
        if hour is None:
            t = datetime(t.year, t.month, t.day) + timedelta(days=1)
            continue
        if hour != t.hour:
            t = t.replace(hour=hour, minute=0, second=0)
        minute = _first_at_least(rule.minutes, t.minute)
        if minute is None:
            t = t.replace(minute=0, second=0) + timedelta(hours=1)
            continue
        if minute != t.minute:
            t = t.replace(minute=minute, second=0)
        second = _first_at_least(rule.seconds, t.second)
        if second is None:
            t = t.replace(second=0) + timedelta(minutes=1)
            continue
        return t.replace(second=second, microsecond=0)
    return None


def _match_backward(rule: _Cron, wall: datetime, limit_year: int) -> datetime | None:
    """Largest naive wall time <= `wall` matching every field."""
    t = wall.replace(microsecond=0)
    while t.year >= max(limit_year, _MIN_YEAR):
        month = _last_at_most(rule.months, t.month)
        if month is None:
            t = _end_of_month(datetime(t.year - 1, rule.months[-1], 1))
            continue
        if month != t.month:
            t = _end_of_month(datetime(t.year, month, 1))
        day = _last_at_most(rule.days_of(t.year, t.month), t.day)
        if day is None:
            t = _month_start(t.year, t.month) - _ONE_SECOND
            continue
        if day != t.day:
            t = datetime(t.year, t.month, day, 23, 59, 59)
        hour = _last_at_most(rule.hours, t.hour)
        if hour is None:
            t = datetime(t.year, t.month, t.day) - _ONE_SECOND
            continue
        if hour != t.hour:
            t = t.replace(hour=hour, minute=59, second=59)
        minute = _last_at_most(rule.minutes, t.minute)
        if minute is None:
            t = t.replace(minute=0, second=0) - _ONE_SECOND
            continue
        if minute != t.minute:
            t = t.replace(minute=minute, second=59)
        second = _last_at_most(rule.seconds, t.second)
        if second is None:
            t = t.replace(second=0) - _ONE_SECOND
            continue
        return t.replace(second=second)
    return None


def _end_of_month(first_day: datetime) -> datetime:
    if first_day.month == 12:
        nxt = datetime(first_day.year + 1, 1, 1)
    else:
        nxt = datetime(first_day.year, first_day.month + 1, 1)
    return nxt - _ONE_SECOND
