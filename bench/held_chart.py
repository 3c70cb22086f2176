"""One record of held-snapshot runs side by side: `held_snapshot.py` and
`held_snapshot_peers.py` JSONs in, a compact JSON and an SVG out.

    .venv/bin/python bench/held_chart.py --out docs/records/held-snapshot-pg \\
        headgate=/tmp/h.json pgqueuer=/tmp/p.json procrastinate=/tmp/r.json

A FILE may also be an earlier record, from which the run called NAME is carried over.

The JSON keeps, per system, the run's settings and phase summaries and its per-second
completions, production and backlog (the dead and live tuples every ten seconds); the
SVG draws completions a second and the backlog, one row of charts per system, with the
hold marked. Written by hand, as bench/long_horizon.py's: no plotting dependency.
"""

from __future__ import annotations

import argparse
import html
import json
from pathlib import Path
from typing import Any

KEPT = ("bench", "store", "system", "rate", "concurrency", "seconds", "phases",
        "backlog_cleared_after_s", "produced", "completed", "completed_twice", "versions",
        "commit", "python", "cpus")


def compact(run: dict[str, Any]) -> dict[str, Any]:
    samples = run["samples"]
    out = {k: run[k] for k in KEPT if k in run}
    out["per_second"] = {k: [s[k] for s in samples] for k in ("completed", "produced", "backlog")}
    out["phase_starts_s"] = {p: next(s["t"] for s in samples if s["phase"] == p) - 1
                             for p in ("held", "released")}
    out["tuples_every_10_s"] = [[s["t"], s["dead_tuples"], s["live_tuples"]]
                                for s in samples if s["t"] % 10 == 0]
    return out


def chart(x0: int, y0: int, w: int, h: int, title: str, values: list[float],
          hold: tuple[int, int]) -> list[str]:
    top = max(values + [1.0])
    n = max(len(values), 1)
    pad_l, pad_t, pad_b = 52, 22, 18
    pw, ph = w - pad_l - 8, h - pad_t - pad_b

    def x(i: float) -> float:
        return x0 + pad_l + pw * i / n

    def y(v: float) -> float:
        return y0 + pad_t + ph * (1 - v / top)

    line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    return [
        f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#d0d7de"/>',
        f'<rect x="{x(hold[0]):.1f}" y="{y0 + pad_t}" width="{x(hold[1]) - x(hold[0]):.1f}" '
        f'height="{ph}" fill="#fff8c5"/>',
        f'<text x="{x0 + 6}" y="{y0 + 15}">{html.escape(title)}</text>',
        f'<text x="{x0 + pad_l - 4}" y="{y(top) + 4:.1f}" text-anchor="end">{top:,.0f}</text>',
        f'<text x="{x0 + pad_l - 4}" y="{y(0) + 4:.1f}" text-anchor="end">0</text>',
        f'<text x="{x0 + w - 8}" y="{y0 + h - 4}" text-anchor="end">{n / 60:.3g} min</text>',
        f'<polyline points="{line}" fill="none" stroke="#0969da" stroke-width="1.2"/>',
    ]


def svg(runs: dict[str, dict[str, Any]]) -> str:
    w, h = 440, 150
    width, height = 2 * (w + 10) + 10, len(runs) * (h + 10) + 40
    first = next(iter(runs.values()))
    head = (f"held snapshot on PostgreSQL · {first.get('rate', 0):g} jobs a second · "
            "yellow: the snapshot held")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="8" y="20" font-size="13">{html.escape(head)}</text>']
    for row, (name, run) in enumerate(runs.items()):
        starts = run["phase_starts_s"]
        hold = (starts["held"], starts["released"])
        per = run["per_second"]
        y0 = 35 + row * (h + 10)
        parts += chart(5, y0, w, h, f"{name}: completed a second", per["completed"], hold)
        parts += chart(w + 15, y0, w, h, f"{name}: backlog (jobs)", per["backlog"], hold)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", required=True, help="path without suffix: .json and .svg")
    ap.add_argument("runs", nargs="+", metavar="NAME=FILE")
    args = ap.parse_args()
    runs: dict[str, dict[str, Any]] = {}
    for spec in args.runs:
        name, _, path = spec.partition("=")
        if not path:
            ap.error(f"expected NAME=FILE, got {spec!r}")
        data = json.loads(Path(path).read_text())
        if "samples" in data:
            runs[name] = compact(data)
        elif "per_second" in data.get(name, {}):  # a run of an earlier record, kept
            runs[name] = data[name]
        else:
            ap.error(f"{path} is neither a held-snapshot run nor a record with a run {name!r}")
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n")
    out.with_suffix(".svg").write_text(svg(runs))


if __name__ == "__main__":
    main()
