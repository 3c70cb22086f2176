"""Schedule-spec evaluation against independently computed instants.

Expected values come from two places, both unlike the implementation (which walks local
wall-clock time field by field and maps it back to instants):
- literal epoch milliseconds worked out by hand (the comment beside each says how), and
- a brute-force oracle that steps through UTC instants one by one, asks zoneinfo for the
  local time of each, and keeps those whose local fields match, skipping a local time
  already seen (the second pass of a repeated hour).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from headgate.core import InvalidInput
from headgate.core.schedule_spec import next_after, ticks_between, validate

H = 3_600_000
DAY = 24 * H


def utc_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def oracle(
    zone: str, after: str, until: str, step_s: int, match
) -> list[int]:
    """Every instant in (after, until] on a `step_s` grid whose local time satisfies
    `match(local_datetime)`, first occurrence only."""
    tz = ZoneInfo(zone)
    t = datetime.fromisoformat(after).replace(tzinfo=UTC)
    end = datetime.fromisoformat(until).replace(tzinfo=UTC)
    seen: set[datetime] = set()
    out = []
    while t < end:
        t += timedelta(seconds=step_s)
        local = t.astimezone(tz)
        naive = local.replace(tzinfo=None)
        if match(local) and naive not in seen:
            out.append(int(t.timestamp() * 1000))
        seen.add(naive)
    return out


def chain(spec: str, start_ms: int, n: int) -> list[int]:
    out, t = [], start_ms
    for _ in range(n):
        t = next_after(spec, t)
        out.append(t)
    return out


# -- table of cases -----------------------------------------------------------------

CASES = [
    # (spec, after ISO UTC, expected ISO UTC ticks following it)
    ("* * * * *", "2026-05-05 10:00:30", [
        "2026-05-05 10:01:00", "2026-05-05 10:02:00", "2026-05-05 10:03:00"]),
    ("*/15 * * * * *", "2026-05-05 23:59:50", [
        "2026-05-06 00:00:00", "2026-05-06 00:00:15", "2026-05-06 00:00:30",
        "2026-05-06 00:00:45", "2026-05-06 00:01:00"]),
    # 2026-01-05 is a Monday (2026-01-01 was a Thursday).
    ("0 9 * * MON-FRI", "2026-01-02 12:00:00", [
        "2026-01-05 09:00:00", "2026-01-06 09:00:00", "2026-01-07 09:00:00",
        "2026-01-08 09:00:00", "2026-01-09 09:00:00", "2026-01-12 09:00:00"]),
    ("0 0 * * sun,7", "2026-01-01 00:00:00", [
        "2026-01-04 00:00:00", "2026-01-11 00:00:00"]),
    ("0 0 1 JAN,jul *", "2026-02-01 00:00:00", [
        "2026-07-01 00:00:00", "2027-01-01 00:00:00"]),
    ("30 4 1-3/2 * *", "2026-03-01 05:00:00", [
        "2026-03-03 04:30:00", "2026-04-01 04:30:00"]),
    # dom and dow both restricted: either matches. 2026-02-13 is a Friday.
    ("0 0 13 * FRI", "2026-02-01 00:00:00", [
        "2026-02-06 00:00:00", "2026-02-13 00:00:00", "2026-02-20 00:00:00",
        "2026-02-27 00:00:00", "2026-03-06 00:00:00", "2026-03-13 00:00:00"]),
    ("0 0 29 2 *", "2026-01-01 00:00:00", ["2028-02-29 00:00:00", "2032-02-29 00:00:00"]),
    ("15,45 */6 * * *", "2026-06-01 05:50:00", [
        "2026-06-01 06:15:00", "2026-06-01 06:45:00", "2026-06-01 12:15:00"]),
]


@pytest.mark.parametrize(("spec", "after", "expected"), CASES)
def test_table(spec: str, after: str, expected: list[str]) -> None:
    want = [utc_ms(x) for x in expected]
    assert chain(spec, utc_ms(after), len(want)) == want
    # The same ticks come back from the backwards walk.
    assert ticks_between(spec, utc_ms(after), want[-1], 100) == want


def test_every_minute_matches_oracle_across_a_day() -> None:
    want = oracle("UTC", "2026-03-01 00:00:00", "2026-03-02 00:00:00", 60, lambda _: True)
    assert len(want) == 1440
    got = ticks_between("* * * * *", utc_ms("2026-03-01 00:00:00"),
                        utc_ms("2026-03-02 00:00:00"), 5000)
    assert got == want


def test_every_15_seconds_six_fields() -> None:
    want = oracle("UTC", "2026-03-01 00:00:07", "2026-03-01 00:10:00", 1,
                  lambda t: t.second % 15 == 0)
    got = ticks_between("*/15 * * * * *", utc_ms("2026-03-01 00:00:07"),
                        utc_ms("2026-03-01 00:10:00"), 1000)
    assert got == want
    assert len(got) == 40


def test_every_ms_is_epoch_aligned() -> None:
    # Multiples of 30 000 since the epoch, whatever the starting point.
    assert next_after("@every:30000", 0) == 30_000
    assert next_after("@every:30000", 29_999) == 30_000
    assert next_after("@every:30000", 30_000) == 60_000
    assert next_after("@every:30000", 1_767_225_612_345) == 1_767_225_630_000
    assert ticks_between("@every:30000", 45_000, 151_000, 100) == [60_000, 90_000, 120_000,
                                                                   150_000]
    # Only the most recent `limit` when there are more.
    assert ticks_between("@every:30000", 0, 10 * 30_000, 3) == [240_000, 270_000, 300_000]
    assert ticks_between("@every:1", 10, 13, 10) == [11, 12, 13]


NY = "CRON_TZ=America/New_York"


def test_new_york_spring_forward_skips_nonexistent_time() -> None:
    # 2026-03-08 02:00 EST -> 03:00 EDT, so 02:30 does not exist that day.
    # 2026-03-07 02:30 EST = 07:30 UTC; 2026-03-09 02:30 EDT = 06:30 UTC.
    spec = f"{NY} 30 2 * * *"
    after = utc_ms("2026-03-06 12:00:00")
    assert chain(spec, after, 2) == [1772868600000, 1773037800000]
    assert chain(spec, after, 2) == [utc_ms("2026-03-07 07:30:00"),
                                     utc_ms("2026-03-09 06:30:00")]
    want = oracle("America/New_York", "2026-03-06 12:00:00", "2026-03-10 12:00:00", 60,
                  lambda t: (t.hour, t.minute) == (2, 30))
    assert ticks_between(spec, after, utc_ms("2026-03-10 12:00:00"), 10) == want
    assert len(want) == 3  # the 7th, 9th and 10th: none on the 8th


def test_new_york_fall_back_fires_once_at_first_occurrence() -> None:
    # 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens at 05:30 UTC (EDT, -4) and again
    # at 06:30 UTC (EST, -5); only the first fires. Next day 01:30 EST = 06:30 UTC.
    spec = f"{NY} 30 1 * * *"
    after = utc_ms("2026-10-31 12:00:00")
    assert chain(spec, after, 2) == [1793511000000, 1793601000000]
    assert chain(spec, after, 2) == [utc_ms("2026-11-01 05:30:00"),
                                     utc_ms("2026-11-02 06:30:00")]
    # From inside the second pass of the repeated hour, the next tick is tomorrow's.
    assert next_after(spec, utc_ms("2026-11-01 06:00:00")) == utc_ms("2026-11-02 06:30:00")
    # And looking back from there finds the first occurrence.
    assert ticks_between(spec, after, utc_ms("2026-11-01 06:45:00"), 5) == [
        utc_ms("2026-11-01 05:30:00")]
    want = oracle("America/New_York", "2026-10-30 12:00:00", "2026-11-03 12:00:00", 60,
                  lambda t: (t.hour, t.minute) == (1, 30))
    got = ticks_between(spec, utc_ms("2026-10-30 12:00:00"), utc_ms("2026-11-03 12:00:00"), 10)
    assert got == want
    assert len(got) == 4


def test_fall_back_every_ten_minutes_through_repeated_hour() -> None:
    spec = f"{NY} */10 0-2 1 11 *"
    want = oracle("America/New_York", "2026-11-01 03:00:00", "2026-11-01 09:00:00", 60,
                  lambda t: t.minute % 10 == 0 and t.hour <= 2)
    # 00:00..02:50 local with 01:xx once: 18 distinct wall times.
    assert len(want) == 18
    got = ticks_between(spec, utc_ms("2026-11-01 03:00:00"), utc_ms("2026-11-01 09:00:00"), 50)
    assert got == want
    assert chain(spec, utc_ms("2026-11-01 03:00:00"), 18) == want


def test_zone_other_than_new_york_matches_oracle() -> None:
    # Europe/Berlin springs forward 2026-03-29 02:00 -> 03:00.
    spec = "CRON_TZ=Europe/Berlin 0 */30 1-3 * * *"
    want = oracle("Europe/Berlin", "2026-03-28 00:00:00", "2026-03-30 06:00:00", 60,
                  lambda t: t.minute in (0, 30) and 1 <= t.hour <= 3)
    got = ticks_between(spec, utc_ms("2026-03-28 00:00:00"), utc_ms("2026-03-30 06:00:00"), 50)
    assert got == want
    # 28th: 01:30..03:30 (01:00 CET is the exclusive start) = 5; 29th: no 02:00 or
    # 02:30 = 4; 30th: all 6.
    assert len(got) == 5 + 4 + 6


def test_last_day_of_month_via_range_and_check() -> None:
    # "Last day of month" is spelled as the 28th-31st filtered by "tomorrow is the 1st".
    spec = "0 0 28-31 * *"
    ticks = chain(spec, utc_ms("2026-01-01 00:00:00"), 60)
    last_days = [
        t for t in ticks
        if (datetime.fromtimestamp(t / 1000, UTC) + timedelta(days=1)).day == 1
    ]
    assert [datetime.fromtimestamp(t / 1000, UTC).strftime("%m-%d") for t in last_days[:12]] \
        == ["01-31", "02-28", "03-31", "04-30", "05-31", "06-30", "07-31", "08-31",
            "09-30", "10-31", "11-30", "12-31"]
    want = oracle("UTC", "2026-01-01 00:00:00", "2026-12-31 23:59:59", 3600,
                  lambda t: t.hour == 0 and t.day >= 28)
    assert ticks[: len(want)] == want


def test_day_of_week_names_match_numbers() -> None:
    start = utc_ms("2026-04-01 00:00:00")
    assert chain("0 12 * * MON,wed,Fri", start, 9) == chain("0 12 * * 1,3,5", start, 9)
    assert chain("0 12 * * SAT-SUN", start, 4) == chain("0 12 * * 0,6", start, 4)
    want = oracle("UTC", "2026-04-01 00:00:00", "2026-04-30 00:00:00", 3600,
                  lambda t: t.hour == 12 and t.weekday() in (0, 2, 4))
    assert ticks_between("0 12 * * MON,WED,FRI", start, utc_ms("2026-04-30 00:00:00"),
                         100) == want


def test_ticks_between_limit_returns_most_recent() -> None:
    got = ticks_between("0 * * * * *", utc_ms("2026-01-01 00:00:00"),
                        utc_ms("2026-01-02 00:00:00"), 3)
    assert got == [utc_ms("2026-01-01 23:58:00"), utc_ms("2026-01-01 23:59:00"),
                   utc_ms("2026-01-02 00:00:00")]
    assert ticks_between("* * * * *", 10, 10, 5) == []


def test_long_outage_is_cheap() -> None:
    # A year of every-second ticks: the backwards walk touches only `limit` of them.
    got = ticks_between("* * * * * *", 0, utc_ms("2027-01-01 00:00:00"), 5)
    assert got[-1] == utc_ms("2027-01-01 00:00:00")
    assert len(got) == 5


@pytest.mark.parametrize(("spec", "words"), [
    ("* * * *", "5 fields"),
    ("* * * * * * *", "got 7"),
    ("60 * * * *", "minute value 60"),
    ("* 24 * * *", "hour value 24"),
    ("* * 0 * *", "day-of-month value 0"),
    ("* * * 13 *", "month value 13"),
    ("* * * * 8", "day-of-week value 8"),
    ("*/0 * * * *", "bad step"),
    ("*/x * * * *", "bad step"),
    ("5-1 * * * *", "bad range"),
    ("* * * FOO *", "bad value 'FOO'"),
    ("1,,2 * * * *", "empty list item"),
    ("CRON_TZ=Mars/Olympus 0 * * * *", "Mars/Olympus"),
    ("CRON_TZ=../etc/passwd 0 * * * *", "unknown time zone"),
    ("CRON_TZ=UTC @every:1000", "CRON_TZ"),
    ("@every:0", ">= 1"),
    ("@every:-5", "@every"),
    ("@every:abc", "@every"),
    ("@hourly", "unknown spec"),
    ("", "empty"),
    ("0 0 30 2 *", "never fires"),
    # Unicode digits pass str.isdigit(); '²' then crashed int() (an HTTP 500), and '٣'
    # or '١٠٠٠' were read as 3 and 1000.
    ("*/² * * * *", "bad step '²'"),
    ("² * * * *", "bad value '²'"),
    ("0 0 1-² * *", "bad value '²'"),
    ("٣ * * * *", "bad value '٣'"),
    ("@every:١٠٠٠", "unknown spec"),
    ("0 0 * * ſun", "bad value 'ſun'"),  # 'ſ'.upper() == 'S'
])
def test_invalid_specs_name_the_problem(spec: str, words: str) -> None:
    with pytest.raises(InvalidInput, match=None) as info:
        validate(spec)
    assert words in str(info.value)


@pytest.mark.parametrize(("spec", "after", "expected"), [
    # Feb 1 on a Monday: 2027, then 2038 (11 years on).
    ("0 0 */31 2 MON", "2027-02-01 00:00:00", ["2038-02-01 00:00:00", "2044-02-01 00:00:00"]),
    # Feb 29 on a Sunday: 2032, then 2060 (28 years on).
    ("0 0 29 2 */7", "2032-02-29 00:00:00", ["2060-02-29 00:00:00", "2088-02-29 00:00:00"]),
])
def test_sparse_specs_find_ticks_decades_apart(
    spec: str, after: str, expected: list[str]
) -> None:
    """The search once gave up after 9 years: these raised "has no tick after"."""
    want = [utc_ms(t) for t in expected]
    assert chain(spec, utc_ms(after), 2) == want
    assert ticks_between(spec, utc_ms("2020-01-01 00:00:00"), want[-1], 10)[-2:] == want
    for t in want:
        assert datetime.fromtimestamp(t / 1000, UTC).strftime("%a %d %b") in (
            "Mon 01 Feb", "Sun 29 Feb")


def test_valid_specs() -> None:
    for spec in ("@every:1", "@every:30000", "0 0 29 2 *", "0 0 31 * *",
                 "CRON_TZ=Asia/Kolkata 0 9 * * *", "  */5 * * * *  ", "0 0 * * 7",
                 "10/15 * * * * *", "0 0 1-7 * MON"):
        validate(spec)
