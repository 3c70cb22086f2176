"""The start forecast's reads beyond the counters (Store.forecast_inputs): where given
jobs stand in their partition's admission order, each queue's longest-waiting job and
its waiting jobs' rate classes. Every read is bounded: a count stops at AHEAD_LIMIT and
the class mix is a sample of CLASS_SAMPLE jobs, so a deep backlog costs a bounded scan.
"""

from __future__ import annotations

from collections.abc import Sequence

from headgate.core.records import ForecastInputs

from .conn import Connection
from .queries import load

AHEAD_LIMIT = 10_000
CLASS_SAMPLE = 2_000

Q = load(__name__)
COUNT_AHEAD = Q["count_ahead"]
SELECT_PLACE = Q["select_place"]
SELECT_OLDEST = Q["select_oldest"]
SELECT_CLASS_MIX = Q["select_class_mix"]


def forecast_inputs(conn: Connection, job_ids: Sequence[str],
                    queues: Sequence[str]) -> ForecastInputs:
    ahead: dict[str, int] = {}
    for job_id in dict.fromkeys(job_ids):
        row = conn.execute(SELECT_PLACE, (job_id,)).fetchone()
        if row is None or row[0] != "available":
            continue
        _, queue, partition, priority, rowid = row
        ahead[job_id] = conn.execute(
            COUNT_AHEAD, (queue, partition, priority, priority, rowid, AHEAD_LIMIT)
        ).fetchone()[0]
    oldest: dict[str, str] = {}
    classes: dict[str, dict[str, int]] = {}
    for queue in dict.fromkeys(queues):
        row = conn.execute(SELECT_OLDEST, (queue,)).fetchone()
        if row is not None:
            oldest[queue] = row[0]
        mix = {name: n for name, n in conn.execute(SELECT_CLASS_MIX, (queue, CLASS_SAMPLE))}
        if mix:
            classes[queue] = mix
    return ForecastInputs(ahead, oldest, classes, AHEAD_LIMIT, CLASS_SAMPLE)
