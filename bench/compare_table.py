"""The performance targets as one markdown table of ratios with PASS/MISS, from ONE run.

    .venv/bin/python bench/compare_table.py OUT_DIR      (what bench/compare.sh calls)
    .venv/bin/python bench/compare_table.py --ab OUT_DIR [NAME_A NAME_B]   (AB=... compare.sh)

Reads every `*.jsonl` that bench/compare.sh wrote in OUT_DIR: the peer harness's JSON
lines (headgate's rows from bench/peers_headgate.py and each peer's own script), and the
lines of bench/limits.py, bench/wal.py, bench/http.py and bench/memory.py. Every figure
in a verdict comes from that directory, i.e. from the same run; a reference that was
not measured (a row left out with ONLY/SKIP/SKIP_SLOW, a peer that failed or was
skipped) gives "n/a" and says which, never a figure from elsewhere. "Best peer" is the
best of the listed peers that were measured; the missing ones are named beside it.

Each throughput figure has its CPU microseconds per job beside it (`cpu_us_per_job`,
which bench/cpu_meter.py adds to the harness's lines: the producer, the worker and the
PostgreSQL server over the same window), and the targets table the ratio of the two
sides' CPU per job. After the targets: every row's jobs/s and CPU per job by part, the
physical limits with headgate's ratio to each (bench/limits.py) and WAL bytes per job
(bench/wal.py), for reading the misses.

`--ab OUT_DIR` summarises an A/B sitting: OUT_DIR/a and OUT_DIR/b hold the two commits'
headgate rows (OUT_DIR itself any peer rows run beside them); per row and workload, each
side's median and min–max of jobs/s and of CPU µs/job, and B over A.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Rows = dict[str, dict[str, dict[str, Any]]]  # peer -> workload -> JSON line

SQLITE_PEERS = ["huey", "dbos[sqlite]"]
PG_ASYNC = "pgqueuer[async-producer]"
PG_PEERS = ["pgqueuer", PG_ASYNC, "oban", "chancy", "dbos[pg]"]
# Peers whose W3 worker holds at most 2 jobs in flight (the harness's concurrency 2).
PG_CAPPED = ["pgqueuer", "oban", "chancy", "dbos[pg]"]
ALL_PEERS = [*SQLITE_PEERS, *PG_PEERS, "pgqueuer[worker=default]"]


@dataclass
class Data:
    rows: Rows = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    other: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # bench -> lines


def load(out: Path) -> Data:
    d = Data()
    for path in sorted(out.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if "bench" in rec:
                d.other.setdefault(rec["bench"], []).append(rec)
            elif rec.get("skipped"):
                d.skipped[rec["peer"]] = rec["skipped"]
            elif "peer" in rec and "workload" in rec:
                d.rows.setdefault(rec["peer"], {})[rec["workload"]] = rec
    return d


@dataclass
class Fig:
    value: float | None
    label: str
    cpu: float | None = None  # total CPU µs per job, where measured


def cpu(d: Data, peer: str, workload: str) -> float | None:
    rec = d.rows.get(peer, {}).get(workload) or {}
    v = (rec.get("cpu_us_per_job") or {}).get("total", {}).get("median")
    return None if v is None else float(v)


def value(d: Data, peer: str, workload: str) -> float | None:
    rec = d.rows.get(peer, {}).get(workload)
    if rec is None:
        return None
    v = rec["p50_ms"]["median"] if workload == "W4" else rec.get("median")
    return None if v is None else float(v)


def fig(d: Data, peer: str, workload: str) -> Fig:
    v = value(d, peer, workload)
    return Fig(v, peer if v is not None else f"{peer} (not measured)", cpu(d, peer, workload))


# Variant rows that by design measure only some workloads (bench/compare.sh).
ONLY_FOR = {"pgqueuer[worker=default]": ("W3", "W4"), "pgqueuer[async-producer]": ("W1", "W2")}


def best(d: Data, peers: list[str], workload: str, lowest: bool = False) -> Fig:
    peers = [p for p in peers if workload in ONLY_FOR.get(p, (workload,))]
    have = [(p, v) for p in peers if (v := value(d, p, workload)) is not None]
    missing = []
    for p in peers:
        rec = d.rows.get(p, {}).get(workload)
        if value(d, p, workload) is not None:
            continue
        if rec is not None and rec.get("batch_api") is False:
            continue  # "no batch API" is the peer's answer, not a gap in this run
        missing.append(p + (f": {d.skipped[p]}" if p in d.skipped else ""))
    note = f"; not measured: {', '.join(missing)}" if missing else ""
    if not have:
        return Fig(None, f"none measured{note}")
    p, v = (min if lowest else max)(have, key=lambda x: x[1])
    return Fig(v, f"{p}{' (best of ' + str(len(have)) + ')' if len(have) > 1 else ''}{note}",
               cpu(d, p, workload))


def other(d: Data, bench: str, key: str, val: str) -> dict[str, Any] | None:
    return next((r for r in d.other.get(bench, []) if r.get(key) == val), None)


def limit_fig(d: Data, store: str, loop: str) -> Fig:
    rec = next((r for r in d.other.get("limits", [])
                if r["store"] == store and r["loop"] == loop), None)
    if rec is None:
        return Fig(None, f"limit {loop} (not measured)")
    return Fig(float(rec["median"]), f"raw {'sqlite3' if store == 'sqlite' else 'psycopg'} "
                                     f"{loop}")


def http_fig(d: Data, row: str) -> Fig:
    rec = other(d, "http", "row", row)
    return Fig(None if rec is None else float(rec["median"]),
               row if rec is not None else f"{row} (not measured)")


def mem_fig(d: Data, row: str) -> tuple[Fig, str]:
    rec = other(d, "memory", "row", row)
    if rec is None:
        return Fig(None, f"{row} (not measured)"), ""
    return (Fig(float(rec["late_over_early"]["median"]), row),
            f"{rec['early_mib']['median']:.1f} → {rec['late_mib']['median']:.1f} MiB "
            f"({rec['early_at']:,} → {rec['late_at']:,})")


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "us":
        return f"{v:,.0f} µs/job"
    if unit == "ms":
        return f"{v:.1f} ms"
    if unit == "x":
        return f"{v:.3f}×"
    return f"{v:,.0f}/s"


@dataclass
class Target:
    backend: str
    what: str
    ours: Fig
    ref: Fig
    factor: float
    unit: str  # "/s" (higher is better), "ms" or "x" (lower is better)
    note: str = ""
    # The raw loop on headgate's own table (bench/limits.py): a target whose required
    # figure is above it cannot be met with this schema, and the verdict says so.
    limit: Fig | None = None
    # A bound on our CPU per job over the reference's, where the target has one: a
    # throughput bought with more CPU does not pass.
    cpu_factor: float | None = None

    def cpu_ratio(self) -> float | None:
        if self.ours.cpu is None or not self.ref.cpu:
            return None
        return self.ours.cpu / self.ref.cpu

    def cells(self) -> list[str]:
        lower = self.unit in ("ms", "x")
        if self.unit == "x":  # ours is already the ratio (late/early)
            ratio = self.ours.value
        elif self.ours.value is None or not self.ref.value:
            ratio = None
        else:
            ratio = self.ours.value / self.ref.value
        if ratio is None:
            verdict, ratio_s = "n/a (not measured)", "-"
        else:
            ok = ratio <= self.factor if lower else ratio >= self.factor
            verdict, ratio_s = ("PASS" if ok else "MISS"), f"{ratio:.2f}×"
            cpu = self.cpu_ratio()
            if self.cpu_factor is not None and verdict == "PASS":
                if cpu is None:
                    verdict = "n/a (CPU per job not measured)"
                elif cpu > self.cpu_factor:
                    verdict = f"MISS (CPU per job {cpu:.2f}×)"
        if self.note:
            verdict = ("MISS" if verdict == "PASS" else verdict) + f" ({self.note})"
        elif verdict == "MISS" and self.limit is not None and self.limit.value \
                and self.ref.value and self.factor * self.ref.value > self.limit.value:
            verdict += (f" (needs {fmt(self.factor * self.ref.value, self.unit)}, above "
                        f"the {self.limit.label} limit {fmt(self.limit.value, self.unit)})")
        ref = (self.ref.label if self.unit == "x"
               else f"{fmt(self.ref.value, self.unit)}{cpu_s(self.ref)} {self.ref.label}")
        cpu = self.cpu_ratio()
        need = f"{'≤' if lower else '≥'} {self.factor:.2f}×"
        if self.cpu_factor is not None:
            need += f", CPU ≤ {self.cpu_factor:.2f}×"
        return [self.backend, self.what,
                f"{fmt(self.ours.value, self.unit)}{cpu_s(self.ours)} {self.ours.label}",
                ref, ratio_s, need, verdict, "-" if cpu is None else f"{cpu:.2f}×"]


def cpu_s(f: Fig) -> str:
    return "" if f.cpu is None else f" ({fmt(f.cpu, 'us')})"


def once(d: Data, peer: str) -> str:
    rec = d.rows.get(peer, {}).get("W3")
    if rec is not None and not rec.get("exactly_once", False):
        return "W3 NOT exactly-once"
    return ""


def targets(d: Data) -> list[Target]:
    hs, hp = "headgate[sqlite]", "headgate[pg]"
    t = [
        Target("SQLite", "W1 single enqueue ≥ 2× the best SQLite peer", fig(d, hs, "W1"),
               best(d, SQLITE_PEERS, "W1"), 2.0, "/s",
               limit=limit_fig(d, "sqlite", "insert_commit"), cpu_factor=0.5),
        Target("SQLite", "W2 batch enqueue ≥ 1.5× the best batch figure of any peer",
               fig(d, hs, "W2"), best(d, ALL_PEERS, "W2"), 1.5, "/s",
               limit=limit_fig(d, "sqlite", "batch_insert")),
        Target("SQLite", "W3 drain, concurrency 2 ≥ 2× the best SQLite peer",
               fig(d, hs, "W3"), best(d, SQLITE_PEERS, "W3"), 2.0, "/s", once(d, hs),
               cpu_factor=0.5),
        Target("SQLite", "W4 pickup p50 ≤ every peer's", fig(d, hs, "W4"),
               best(d, ALL_PEERS, "W4", lowest=True), 1.0, "ms"),
        Target("PostgreSQL", "W1 ≥ 1.0× pgqueuer's async producer", fig(d, hp, "W1"),
               fig(d, PG_ASYNC, "W1"), 1.0, "/s", limit=limit_fig(d, "pg", "insert_commit"),
               cpu_factor=1.0),
        Target("PostgreSQL", "W1 ≥ 0.8× the physical limit", fig(d, hp, "W1"),
               limit_fig(d, "pg", "insert_commit"), 0.8, "/s"),
        Target("PostgreSQL", "W2 ≥ 1.2× pgqueuer's async producer", fig(d, hp, "W2"),
               fig(d, PG_ASYNC, "W2"), 1.2, "/s", limit=limit_fig(d, "pg", "batch_insert"),
               cpu_factor=1.0),
        Target("PostgreSQL", "W3, concurrency 2 ≥ 2× the best PostgreSQL peer capped at 2",
               fig(d, hp, "W3"), best(d, PG_CAPPED, "W3"), 2.0, "/s", once(d, hp)),
        Target("PostgreSQL", "W3, matched in-flight: headgate --concurrency 10 ≥ 1.2× "
               "pgqueuer on its defaults (batch 10)", fig(d, "headgate[pg,c10]", "W3"),
               fig(d, "pgqueuer[worker=default]", "W3"), 1.2, "/s",
               once(d, "headgate[pg,c10]"), cpu_factor=1.0),
        Target("PostgreSQL", "W4 pickup p50 ≤ every PostgreSQL peer's", fig(d, hp, "W4"),
               best(d, [*PG_PEERS, "pgqueuer[worker=default]"], "W4", lowest=True), 1.0,
               "ms"),
    ]
    for kind, backend in (("sqlite", "SQLite"), ("pg", "PostgreSQL")):
        plain, pol = f"headgate[{kind}]", f"headgate[{kind}+policies]"
        for w in ("W1", "W2", "W3"):
            t.append(Target(f"{backend} + policies", f"{w} within 25 % of policy-free",
                            fig(d, pol, w), fig(d, plain, w), 0.75, "/s",
                            once(d, pol) if w == "W3" else ""))
        t.append(Target(f"{backend} + policies", "W4 p50 within 25 % of policy-free",
                        fig(d, pol, "W4"), fig(d, plain, "W4"), 1.25, "ms"))
    for kind, backend in (("sqlite", "SQLite"), ("pg", "PostgreSQL")):
        t.append(Target(backend, "HTTP enqueue (POST /api/v1/jobs, 8 clients) ≥ 0.7× the "
                        "same server configuration's trivial JSON POST",
                        http_fig(d, f"headgate[{kind}]"), http_fig(d, "ceiling[flask]"), 0.7,
                        "/s"))
    for part, what in (("worker", "worker RSS after 100,000 jobs ≤ 1.10× after 1,000"),
                       ("serve", "serve RSS under the HTTP load, late ≤ 1.10× early")):
        for kind, backend in (("sqlite", "SQLite"), ("pg", "PostgreSQL")):
            ratio, detail = mem_fig(d, f"{part}[{kind}]")
            t.append(Target(backend, f"memory: {what}", ratio, Fig(None, detail or "-"),
                            1.10, "x"))
    return t


def targets_table(d: Data) -> str:
    hdr = ["backend", "target", "headgate (CPU)", "reference (this run) (CPU)", "ratio",
           "need", "verdict", "CPU/job ratio"]
    ts = targets(d)
    lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    cells = [x.cells() for x in ts]
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    passed = sum(1 for c in cells if c[-2] == "PASS")
    measured = sum(1 for c in cells if not c[-2].startswith("n/a"))
    lines += ["", f"{passed} of {len(ts)} targets PASS ({measured} measured)."]
    return "\n".join(lines)


def mmm(agg: dict[str, Any] | None, unit: str) -> str:
    """median (min–max) of an aggregate, or '-'."""
    if not agg or agg.get("median") is None:
        return "-"
    med = fmt(agg["median"], unit)
    if agg.get("min") is None or agg["min"] == agg["max"]:
        return med

    def num(v: float) -> str:
        return f"{v:.1f}" if unit == "ms" else f"{v:,.0f}"
    return f"{med} ({num(agg['min'])}–{num(agg['max'])})"


PARTS = ("client", "worker", "server")


def cpu_parts(rec: dict[str, Any]) -> str:
    c = rec.get("cpu_us_per_job") or {}
    have = [f"{p} {c[p]['median']:,.0f}" for p in PARTS
            if (c.get(p) or {}).get("median") is not None]
    return " + ".join(have) or "-"


def cpu_table(d: Data) -> str:
    lines = ["| row | workload | jobs/s median (min–max) | CPU per job, total | by part "
             "(medians) | W3 after the first job |", "|---|---|---|---|---|---|"]
    for peer, wls in d.rows.items():
        for w in ("W1", "W2", "W3"):
            rec = wls.get(w)
            if rec is None or rec.get("median") is None:
                continue
            after = (mmm((rec.get("cpu_us_per_job_after_first") or {}).get("total"), "us")
                     if w == "W3" else "")
            lines.append(f"| {peer} | {w} | {mmm(rec, '/s')} | "
                         f"{mmm((rec.get('cpu_us_per_job') or {}).get('total'), 'us')} | "
                         f"{cpu_parts(rec)} | {after} |")
    if len(lines) == 2:
        return "(no harness rows)"
    return "\n".join([*lines, "", "W1/W2: the timed loop; W3: worker launch to the N-th side "
                       "effect (the bench's own wait loop not counted); server: the PostgreSQL "
                       "cluster's processes (bench/cpu_meter.py)."])


def ab_table(out: Path, names: list[str]) -> str:
    """Per row and workload, each side's jobs/s and CPU µs/job, and B / A."""
    a, b = load(out / "a"), load(out / "b")
    name_a, name_b = names if len(names) == 2 else ("A", "B")
    commit = {side: sorted({c for wl in data.rows.values() for rec in wl.values()
                            if (c := rec.get("versions", {}).get("commit"))})
              for side, data in (("a", a), ("b", b))}
    lines = [f"A = {name_a} ({', '.join(commit['a']) or '?'}), "
             f"B = {name_b} ({', '.join(commit['b']) or '?'})", "",
             "| row | workload | A jobs/s | B jobs/s | B/A | A CPU/job | B CPU/job | B/A |",
             "|---|---|---|---|---|---|---|---|"]
    for peer in dict.fromkeys([*a.rows, *b.rows]):
        for w in ("W1", "W2", "W3", "W4"):
            ra, rb = a.rows.get(peer, {}).get(w), b.rows.get(peer, {}).get(w)
            if ra is None and rb is None:
                continue
            unit = "ms" if w == "W4" else "/s"
            ta, tb = (None if r is None else (r["p50_ms"] if w == "W4" else r)
                      for r in (ra, rb))
            ca, cb = (None if r is None else (r.get("cpu_us_per_job") or {}).get("total")
                      for r in (ra, rb))
            cells = [peer, w + (" p50" if w == "W4" else ""), mmm(ta, unit), mmm(tb, unit),
                     ratio_of(ta, tb), mmm(ca, "us"), mmm(cb, "us"), ratio_of(ca, cb)]
            lines.append("| " + " | ".join(cells) + " |")
    peers = load(out)
    if peers.rows:
        lines += ["", "Peers beside them, once a round:", "", cpu_table(peers)]
    return "\n".join(lines)


def ratio_of(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    if not a or not b or not a.get("median") or b.get("median") is None:
        return "-"
    return f"{b['median'] / a['median']:.3f}×"


def limits_table(d: Data) -> str:
    pairs = (("W1", "insert_commit"), ("W2", "batch_insert"), ("W3", "claim_ack"))
    lines = ["| store | loop | raw jobs/s median (min–max) | headgate | headgate / raw |",
             "|---|---|---|---|---|"]
    for rec in d.other.get("limits", []):
        store, loop = rec["store"], rec["loop"]
        w = next(w for w, lp in pairs if lp == loop)
        ours = value(d, f"headgate[{store}]", w)
        ratio = f"{ours / rec['median']:.2f}× ({w})" if ours and rec["median"] else "-"
        lines.append(f"| {store} | {loop} | {rec['median']:,.0f} ({rec['min']:,.0f}–"
                     f"{rec['max']:,.0f}) | {fmt(ours, '/s')} | {ratio} |")
    return "\n".join(lines) if len(lines) > 2 else "(bench/limits.py not run)"


def wal_table(d: Data) -> str:
    recs = [r for r in d.other.get("wal", []) if "peer" in r]
    if not recs:
        return "(bench/wal.py not run)"
    lines = ["| row | workload | WAL bytes/job median (min–max) | frames/job |",
             "|---|---|---|---|"]
    for r in recs:
        b = r["wal_bytes_per_job"]
        fr = r.get("wal_frames_per_job", {}).get("median")
        lines.append(f"| {r['peer']} | {r['workload']} | {b['median']:,.0f} ({b['min']:,.0f}–"
                     f"{b['max']:,.0f}) | {'-' if fr is None else fr} |")
    for r in d.other.get("wal", []):
        if "ratios" in r and r["ratios"]:
            lines.append("")
            lines.append(f"{r['store']}: " + ", ".join(f"{k} = {v}×"
                                                       for k, v in r["ratios"].items()))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--ab"] and len(argv) in (2, 4):
        print("## A/B (each side's median (min–max) over its runs; CPU µs per job, total)\n")
        print(ab_table(Path(argv[1]), argv[2:]))
        return 0
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    d = load(out)
    print(targets_table(d))
    if d.skipped:
        print()
        print("Skipped rows: " + "; ".join(f"{p}: {why}" for p, why in d.skipped.items()) + ".")
    commits = sorted({c for wl in d.rows.values() for rec in wl.values()
                      if (c := rec.get("versions", {}).get("commit"))})
    if commits:
        print(f"headgate commit(s) measured: {', '.join(commits)}.")
    load_file = out / "load.txt"
    if load_file.exists():
        avgs = [float(x.split()[1]) for x in load_file.read_text().splitlines() if x.strip()]
        if avgs:
            print(f"1-minute load average during the run: {min(avgs):.1f}–{max(avgs):.1f} "
                  f"(median {sorted(avgs)[len(avgs) // 2]:.1f}) on {os.cpu_count()} CPUs.")
    print("\n## Throughput and CPU µs per job (same run)\n")
    print(cpu_table(d))
    print("\n## Physical limits (bench/limits.py, same run)\n")
    print(limits_table(d))
    print("\n## WAL bytes per job (bench/wal.py, same run)\n")
    print(wal_table(d))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
