"""Issue 8's targets as one markdown table: headgate vs the peers, ratios, PASS/MISS.

    .venv/bin/python bench/compare_table.py OUT_DIR      (what bench/compare.sh calls)

Reads the JSON lines that bench/compare.sh saved in OUT_DIR (`<label>.jsonl`, one file
per peer script run and per headgate variant). A peer figure that was not measured in
this run (PEERS=readme, or a peer script failed) is taken from the peer harness's
README table instead and labelled "README" in the table, never passed off as measured.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = Path(os.environ.get("HG_PEERS_DIR") or ROOT.parent / "shared" / "peers")

Rows = dict[str, dict[str, dict[str, Any]]]  # peer name -> workload -> JSON line


def load(out: Path) -> Rows:
    rows: Rows = {}
    for path in sorted(out.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                rec = json.loads(line)
                rows.setdefault(rec["peer"], {})[rec["workload"]] = rec
    return rows


_CELL = re.compile(r"^\s*([\d.]+)(?:\s*\(([\d.]+)-([\d.]+)\))?")


def _stat(cell: str) -> dict[str, Any] | None:
    m = _CELL.match(cell)
    if not m:
        return None
    median = float(m.group(1))
    lo = float(m.group(2)) if m.group(2) else median
    hi = float(m.group(3)) if m.group(3) else median
    return {"median": median, "min": lo, "max": hi}


def readme_rows(readme: Path) -> Rows:
    """The peers README's results table, in the shape of the JSON lines."""
    rows: Rows = {}
    if not readme.exists():
        return rows
    lines = readme.read_text().splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("| peer | W1"))
    except StopIteration:
        return rows
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 7:
            continue
        name, w1, w2, w3, once, p50, p99 = cells[:7]
        peer: dict[str, dict[str, Any]] = {}
        if (s := _stat(w1)) is not None:
            peer["W1"] = {**s, "source": "README"}
        if (s := _stat(w2)) is not None:
            peer["W2"] = {**s, "source": "README"}
        if (s := _stat(w3)) is not None:
            peer["W3"] = {**s, "exactly_once": once == "yes", "source": "README"}
        p50s, p99s = _stat(p50), _stat(p99)
        if p50s is not None and p99s is not None:
            peer["W4"] = {"p50_ms": p50s, "p99_ms": p99s, "source": "README"}
        rows[name] = peer
    return rows


@dataclass
class Fig:
    value: float | None
    label: str  # who, and where the figure came from


def figure(rows: Rows, fallback: Rows, peer: str, workload: str, key: str = "median"
           ) -> Fig:
    """A throughput median (key=median) or a W4 p50 (key=p50_ms), measured if we have it."""
    for source, table in (("", rows), (" (README)", fallback)):
        rec = table.get(peer, {}).get(workload)
        if rec is None:
            continue
        value = rec["p50_ms"]["median"] if key == "p50_ms" else rec.get("median")
        if value is not None:
            return Fig(float(value), f"{peer}{source}")
    return Fig(None, f"{peer} (not measured)")


def best(figs: list[Fig], lower_is_better: bool = False) -> Fig:
    have = [f for f in figs if f.value is not None]
    if not have:
        return figs[0]
    pick = min if lower_is_better else max
    return pick(have, key=lambda f: f.value or 0.0)


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.1f} ms"
    return f"{value:,.0f}/s"


@dataclass
class Target:
    group: str
    what: str
    ours: Fig
    ref: Fig
    factor: float  # required ratio ours/ref: >= factor (throughput) or <= factor (latency)
    unit: str  # "/s" or "ms"
    note: str = ""
    readme: Fig | None = None  # the same reference as printed in the peers README

    def readme_ratio(self) -> str:
        if self.readme is None or self.readme.value is None or self.ours.value is None:
            return "-"
        return f"{self.ours.value / self.readme.value:.2f}× of {fmt(self.readme.value, self.unit)}"

    def row(self) -> list[str]:
        lower = self.unit == "ms"
        if self.ours.value is None or self.ref.value is None or self.ref.value == 0:
            ratio_s, verdict = "-", "n/a (not measured)"
        else:
            ratio = self.ours.value / self.ref.value
            ok = ratio <= self.factor if lower else ratio >= self.factor
            ratio_s = f"{ratio:.2f}×"
            verdict = "PASS" if ok else "MISS"
        if self.note and verdict == "PASS":
            verdict = f"MISS ({self.note})"
        elif self.note:
            verdict += f" ({self.note})"
        need = f"{'≤' if lower else '≥'} {self.factor:.2f}×"
        return [self.group, self.what, f"{fmt(self.ours.value, self.unit)} {self.ours.label}",
                f"{fmt(self.ref.value, self.unit)} {self.ref.label}", ratio_s, need, verdict,
                self.readme_ratio()]


def targets(rows: Rows, fallback: Rows) -> list[Target]:
    out = _targets(rows, fallback)
    # The same references as the peers README printed them (a quieter machine, or not):
    # shown beside the side-by-side ratio, never used for the verdict.
    for t, r in zip(out, _targets({}, fallback), strict=True):
        if r.ref.label.endswith("(README)"):
            t.readme = r.ref
    return out


def _targets(rows: Rows, fallback: Rows) -> list[Target]:
    def f(peer: str, w: str, key: str = "median") -> Fig:
        return figure(rows, fallback, peer, w, key)

    pgq_w2 = best([f("pgqueuer", "W2"), f("pgqueuer[async-producer]", "W2")])
    pgq_w1 = best([f("pgqueuer", "W1"), f("pgqueuer[async-producer]", "W1")])
    pgq_p50 = best([f("pgqueuer", "W4", "p50_ms"), f("pgqueuer[worker=default]", "W4", "p50_ms")],
                   lower_is_better=True)
    out: list[Target] = []

    def once_note(name: str) -> str:
        rec = rows.get(name, {}).get("W3")
        if rec is not None and not rec.get("exactly_once", False):
            return "W3 NOT exactly-once"
        return ""

    for kind in ("sqlite", "pg"):
        hg = f"headgate[{kind}]"
        group = "SQLite" if kind == "sqlite" else "PostgreSQL"
        if kind == "sqlite":
            out += [
                Target(group, "W1 single enqueue ≥ 2× huey", f(hg, "W1"), f("huey", "W1"), 2.0,
                       "/s"),
                Target(group, "W2 batch(1000) ≥ 1.5× pgqueuer's best", f(hg, "W2"), pgq_w2,
                       1.5, "/s"),
                Target(group, "W3 drain (c=2) ≥ 2× huey", f(hg, "W3"), f("huey", "W3"), 2.0,
                       "/s", once_note(hg)),
                Target(group, "W4 pickup p50 ≤ 5 ms", f(hg, "W4", "p50_ms"),
                       Fig(5.0, "target"), 1.0, "ms"),
            ]
        else:
            out += [
                Target(group, "W1 single enqueue ≥ 2× pgqueuer", f(hg, "W1"), pgq_w1, 2.0,
                       "/s"),
                Target(group, "W2 batch(1000) ≥ 1.5× pgqueuer's best", f(hg, "W2"), pgq_w2,
                       1.5, "/s"),
                Target(group, "W3 drain (c=2) ≥ 1.5× pgqueuer on its defaults", f(hg, "W3"),
                       f("pgqueuer[worker=default]", "W3"), 1.5, "/s", once_note(hg)),
                Target(group, "W4 pickup p50 ≤ pgqueuer's", f(hg, "W4", "p50_ms"), pgq_p50,
                       1.0, "ms"),
            ]
    for kind in ("sqlite", "pg"):
        plain, pol = f"headgate[{kind}]", f"headgate[{kind}+policies]"
        group = ("SQLite" if kind == "sqlite" else "PostgreSQL") + " + policies"
        for w, what in (("W1", "W1"), ("W2", "W2"), ("W3", "W3")):
            out.append(Target(group, f"{what} within 25 % of policy-free", f(pol, w),
                              f(plain, w), 0.75, "/s", once_note(pol) if w == "W3" else ""))
        out.append(Target(group, "W4 p50 within 25 % of policy-free", f(pol, "W4", "p50_ms"),
                          f(plain, "W4", "p50_ms"), 1.25, "ms"))
    return out


def table(rows: Rows, fallback: Rows) -> str:
    hdr = ["backend", "target", "headgate", "reference (this run)", "ratio", "need", "verdict",
           "ratio vs peers README figure"]
    lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    ts = targets(rows, fallback)
    lines += ["| " + " | ".join(t.row()) + " |" for t in ts]
    passed = sum(1 for t in ts if t.row()[6] == "PASS")
    lines.append("")
    lines.append(f"{passed} of {len(ts)} targets PASS.")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    rows = load(out)
    fallback = readme_rows(PEERS_DIR / "README.md")
    used_readme = sorted({t.ref.label for t in targets(rows, fallback)
                          if t.ref.label.endswith("(README)")})
    print(table(rows, fallback))
    if used_readme:
        print()
        print("Not re-run here, taken from the peer harness README (same machine kind, "
              "N=20000, 3 runs): " + ", ".join(x.removesuffix(" (README)")
                                                for x in used_readme) + ".")
    commits: set[str] = set()
    for peer, wl in rows.items():
        if peer.startswith("headgate"):
            for rec in wl.values():
                commit = rec.get("versions", {}).get("commit")
                if commit:
                    commits.add(commit)
    if commits:
        print(f"headgate commit(s) measured: {', '.join(sorted(commits))}.")
    load_file = out / "load.txt"
    if load_file.exists():
        avgs = [float(x.split()[1]) for x in load_file.read_text().splitlines() if x.strip()]
        if avgs:
            print(f"1-minute load average during the runs: {min(avgs):.1f}–{max(avgs):.1f} "
                  f"(median {sorted(avgs)[len(avgs) // 2]:.1f}) on {os.cpu_count()} CPUs.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

