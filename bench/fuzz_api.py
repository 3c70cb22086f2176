"""Fuzz the live API for a long while: schemathesis's engine, every phase, against the
API on a real socket, by hand.

    .venv/bin/python bench/fuzz_api.py --minutes 60                 # SQLite
    .venv/bin/python bench/fuzz_api.py --minutes 60 --store postgresql://u@host/db

The same driver as tests/api/test_fuzz_stateful.py (tests/api_fuzz.py), with larger
budgets, rounds after rounds until the time is up: each round seeds its own things,
runs examples, coverage, fuzzing and the stateful phase (through the document's links)
with a new seed, and checks every response (no 5xx, status code, content type, headers
and body as documented, deleted things stay gone, a missing Idempotency-Key is refused,
undeclared methods are 405) and, for a sample of refused mutations, that the store's
observable state did not change. The server is the suite's (tests/api_helpers.py: the
app on werkzeug with a thread pool) without its operations runner and without duties:
the driver runs bulk operations itself between requests, so nothing but requests
changes the store between the two snapshots. Without `--store` a fresh SQLite file in
a temporary directory is used; a PostgreSQL database given is used as is (give an
empty one).

Prints one line per round and a summary; the exit code is 1 if any round saw a
failure, an engine error or a refused request that changed state.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import api_fuzz  # noqa: E402
from api_helpers import Servers  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="wall time (default 60)")
    ap.add_argument("--store", help="a store URL (default: a fresh SQLite file)")
    ap.add_argument("--examples", type=int, default=30,
                    help="examples per operation in the non-stateful phases (default 30)")
    ap.add_argument("--stateful-examples", type=int, default=200,
                    help="stateful scenarios per round (default 200)")
    ap.add_argument("--steps", type=int, default=50, help="steps per scenario (default 50)")
    ap.add_argument("--seed", type=int, help="the first round's seed (default: random)")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="headgate-fuzz-"))
    store_url = args.store or f"sqlite:///{work / 'fuzz.db'}"
    servers = Servers(store_url)
    api = servers.start(background=False)
    store, base = api.store, api.url
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    deadline = time.monotonic() + args.minutes * 60
    totals = api_fuzz.Report()
    bad = 0
    rounds = 0
    print(f"fuzz_api: {store_url}, {base}, {args.minutes:g} min", flush=True)
    try:
        while time.monotonic() < deadline:
            left = int(deadline - time.monotonic())
            report = api_fuzz.run(
                base, store, max_examples=args.examples,
                stateful_examples=args.stateful_examples, max_steps=args.steps,
                max_time=max(left, 1), seed_value=seed + rounds,
                log=lambda line: print("  " + line, flush=True))
            rounds += 1
            print(f"round {rounds} (seed {seed + rounds - 1}): {report.summary()}", flush=True)
            for line in report.changed_by_refused:
                print("  changed by a refused request: " + line, flush=True)
            bad += (len(report.failures) + len(report.errors) + len(report.changed_by_refused)
                    + len(report.failed_phases()))
            totals.cases.update(report.cases)
            totals.statuses.update(report.statuses)
            totals.stateful_2xx |= report.stateful_2xx
            totals.any_2xx |= report.any_2xx
            totals.refused_checked += report.refused_checked
            totals.worked_jobs += report.worked_jobs
            if api.get("/readyz").status_code != 200:
                print("fuzz_api: error: the server is not ready", flush=True)
                bad += 1
                break
    finally:
        servers.stop_all()
    never = sorted(api_fuzz.labels() - totals.any_2xx)
    never_stateful = sorted(api_fuzz.link_targets() - totals.stateful_2xx)
    print(f"total: {rounds} rounds, {sum(totals.cases.values())} cases "
          f"({dict(totals.cases)}), statuses {dict(sorted(totals.statuses.items()))}, "
          f"{totals.refused_checked} refused mutations compared, "
          f"{totals.worked_jobs} jobs run by the worker, {bad} problems", flush=True)
    print(f"never 2xx: {never or 'none'}; link targets never 2xx in the stateful phase: "
          f"{never_stateful or 'none'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
