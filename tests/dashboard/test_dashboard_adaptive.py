"""The rate-class page for an adaptive class: its summary, the limit's last hour as an
SVG line with a dot per cut and a table of the changes, an edit form that shows what
the operator set (not the adapted limit) with the adaptive fields filled in, and a
pause button whose PUT keeps the class adaptive. Flask's test client on a real SQLite
store."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support import console_app

import headgate
from headgate import Outcome
from headgate.core.adaptive import Adaptive
from headgate.core.records import RateClassChange
from headgate.dashboard import charts

BOUNDS = Adaptive(2, 40, 0.8, 1)


@pytest.fixture
def store(store_url: str) -> Iterator[Any]:
    """Both engines here (store_url is tests/conftest.py's parametrized one), where the
    other console tests take one SQLite file."""
    s = headgate.open_store(store_url)
    yield s
    s.close()


@pytest.fixture
def client(store: Any, tmp_path: Any) -> Any:
    """Flask's test client over the console on `store`."""
    return console_app(store, str(tmp_path / "unused.db")).test_client()


def throttled_once(store: Any) -> int:
    store.upsert_rate_class("smtp", 15, 1000, burst=30, adaptive=BOUNDS)
    headgate.Client(store).enqueue("send", b"x", queue="mail", rate_class="smtp")
    [claim] = store.admit("w", ["mail"], 1)
    store.ack(claim, Outcome.THROTTLED, delay_ms=60_000)
    return int(store.rate_classes()[0].adaptive.last_decrease_ms)


def test_the_page_charts_the_adapted_limit(store: Any, client: Any) -> None:
    at = throttled_once(store)
    body = client.get("/rate-classes").get_data(as_text=True)
    clock = time.strftime("%H:%M", time.gmtime(at / 1000))
    assert f"rate class smtp adapted down to 12/s after 1 throttle at {clock} UTC." in body
    svg = re.search(r'<svg[^>]*class="history limit-chart"[^>]*>(.*?)</svg>', body, re.S)
    assert svg, body[:3000]
    points = re.search(r'<polyline class="line line-limit" points="([^"]+)"', svg.group(1))
    assert points and len(points.group(1).split()) >= 4
    assert svg.group(1).count('<circle class="cut"') == 1
    assert re.search(r"<td>\d\d:\d\d:\d\d</td><td>decrease</td><td class=\"num\">12</td>"
                     r"<td class=\"num\">1</td>", body)
    assert "adaptive 2–40" in body


def test_edit_and_pause_keep_what_the_operator_set(store: Any, client: Any) -> None:
    throttled_once(store)
    body = client.get("/rate-classes?edit=smtp").get_data(as_text=True)
    assert re.search(r'name="limit"[^>]*value="15"', body)  # as set, not the adapted 12
    assert re.search(r'name="burst"[^>]*value="30"', body)
    for name, value in (("min", "2"), ("max", "40"), ("decrease_factor", "0.8"),
                        ("increase_step", "1")):
        assert re.search(rf'name="adaptive\.{name}"[^>]*value="{value}"', body), name
    m = re.search(r"hx-put=\"/api/v1/rate-classes/smtp\"[^>]*data-body='([^']*)'", body)
    assert m
    sent = json.loads(m.group(1).replace("&#34;", '"'))
    assert sent == {"limit": 15, "window_ms": 1000, "burst": 30, "paused": True,
                    "adaptive": {"min": 2, "max": 40, "decrease_factor": 0.8,
                                 "increase_step": 1}}
    # That PUT, as the button sends it, pauses the class and keeps its learned limit.
    store.upsert_rate_class("smtp", sent["limit"], sent["window_ms"], sent["burst"],
                            sent["paused"], adaptive=Adaptive.checked(**sent["adaptive"]))
    rc = store.rate_classes()[0]
    assert rc.paused and rc.limit_per_window == 12


def test_the_line_steps_at_cuts_and_climbs_between() -> None:
    changes = [
        RateClassChange(1_000, 20, 1000, "set", 0),
        RateClassChange(2_000, 10, 1000, "decrease", 3),
        RateClassChange(3_000, 14, 1000, "increase", 0),
    ]
    chart = charts.limit_chart(changes, 0, 4_000, 14, 40, width=444, height=124)
    ys = {round(float(p.split(",")[1])) for p in chart.points.split()}
    assert len(chart.cuts) == 1 and len(chart.rows) == 3
    pts = [tuple(map(float, p.split(","))) for p in chart.points.split()]
    # Flat at 20 until the cut at x(2000), straight down, then a slope to 14 at x(3000).
    x_cut = 44 + (436 - 44) * 2_000 / 4_000
    assert (x_cut, pts[2][1]) in pts and (x_cut, chart.cuts[0]["y"]) in pts
    assert len(ys) == 3
