"""The console's words for policy windows and schedule specs (headgate.dashboard.present)."""

from __future__ import annotations

import pytest

from headgate.dashboard import present


@pytest.mark.parametrize(("limit", "window", "words"), [
    (2, 60_000, "2 per minute"), (20, 1000, "20 per second"), (5, 600_000, "5 per 10 minutes"),
    (1, 86_400_000, "1 per day"), (3, 1500, "3 per 1.5 s"), (1000, 3_600_000, "1,000 per hour"),
])
def test_windows_read_as_spoken(limit: int, window: int, words: str) -> None:
    assert present.per_window(limit, window) == words


@pytest.mark.parametrize(("spec", "words"), [
    ("0 3 * * *", "every day at 03:00 UTC"),
    ("CRON_TZ=Europe/Paris 0 8 * * 1-5", "weekdays at 08:00 Europe/Paris time"),
    ("*/5 * * * *", "every 5 minutes"),
    ("15 * * * *", "every hour at :15"),
    ("0 9 * * 1", "on Mondays at 09:00 UTC"),
    ("0 0 1 * *", "on day 1 of every month at 00:00 UTC"),
    ("0 30 6 * * *", "every day at 06:30 UTC"),
    ("@every:60000", "every minute"),
    ("@every:90000", "every 90 seconds"),
    ("1 2 3 4 5", ""),  # a shape it does not read: the spec stays the description
    ("*/10 3 * * *", ""),
])
def test_cron_specs_read_in_plain_words(spec: str, words: str) -> None:
    assert present.describe_spec(spec) == words


def test_next_run_has_its_clock_time() -> None:
    now = 1_800_000_000_000
    assert present.when(now + 8 * 3_600_000 + 13 * 60_000, now) == "in 8h 13m · 16:13 UTC"
    assert present.when(now + 3 * 86_400_000, now).endswith("08:00 UTC")
    assert present.when(now + 3 * 86_400_000, now).startswith("in 3d 0h · ")
