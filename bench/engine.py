"""Engine benchmark: enqueue and admit+ack throughput on a real store.

Prints one JSON line per (metric, variant): the median and min–max jobs/s over `--runs`
runs, each on a fresh database (a new SQLite file, or a new PostgreSQL database).

Metrics:
  single_enqueue   Client.enqueue, one job per call (one transaction each); with
                   --loops L, L threads share the jobs (a web app's request threads)
  batch_enqueue    Client.enqueue_many, 1000 jobs per call
  admit_ack        N jobs waiting; admit(capacity=100) then ack SUCCESS each (one
                   transaction per ack), until done
  admit_ack_many   the same, acking each admitted batch with one store.ack_many call
  ack_and_admit    the worker's steady state: store.ack_and_admit acks the previous
                   batch and admits the next in one transaction
                   (the last two only where the store has those methods); with
                   --loops L, L such loops at once (threads, one connection each),
                   the jobs spread over --queues Q queues and loop i on queue i % Q:
                   what turns of one queue cost each other, against turns of two
Variants:
  plain            no policy in play
  policies         every job in a rate class (limit high enough never to throttle),
                   spread over 50 partitions, under a concurrency ceiling per partition

Usage:
  .venv/bin/python bench/engine.py [--n 20000] [--runs 3] [--store sqlite|pg]
      [--capacity 100] [--partitions 50] [--loops 1 --queues 1]
  (pg reads HG_PG, else HG_TEST_PG; --profile METRIC prints a cProfile summary)
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import headgate  # noqa: E402
from headgate import Client, Envelope, Outcome, Store  # noqa: E402

QUEUE = "bench"
BATCH = 1000
CAPACITY = 100
PARTITIONS = 50
LOOPS = 1
QUEUES = [QUEUE]
RATE_CLASS = "bench-rate"
PAYLOAD = b'{"to": "someone@example.com", "template": "welcome", "n": %d}'


# -- fresh databases ----------------------------------------------------------------------

@contextlib.contextmanager
def fresh_sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="hg-bench-") as tmp:
        yield f"sqlite:///{tmp}/bench.db"


@contextlib.contextmanager
def fresh_pg() -> Iterator[str]:
    import psycopg

    admin = os.environ.get("HG_PG") or os.environ.get("HG_TEST_PG")
    if not admin:
        raise SystemExit("bench: --store pg needs HG_PG or HG_TEST_PG (a postgresql:// URL)")
    name = f"hg_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(admin)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def check_backend(kind: str) -> Callable[[], contextlib.AbstractContextManager[str]]:
    if kind == "sqlite":
        return fresh_sqlite
    try:
        import headgate.adapters.postgres  # noqa: F401
    except ImportError as exc:
        raise SystemExit(f"bench: the postgres adapter is not available ({exc})") from exc
    return fresh_pg


# -- workload -------------------------------------------------------------------------------

def envelopes(n: int, policies: bool) -> list[Envelope]:
    if not policies:
        return [Envelope(kind="bench.job", payload=PAYLOAD % i, queue=QUEUES[i % len(QUEUES)])
                for i in range(n)]
    return [
        Envelope(kind="bench.job", payload=PAYLOAD % i, queue=QUEUES[i % len(QUEUES)],
                 partition_key=f"tenant-{i % PARTITIONS:02d}", rate_class=RATE_CLASS)
        for i in range(n)
    ]


def install_policies(store: Store) -> None:
    # Large enough never to throttle N jobs, but consulted for every one of them.
    store.upsert_rate_class(RATE_CLASS, limit=10_000_000, window_ms=1_000, burst=10_000_000)
    for queue in QUEUES:
        store.upsert_concurrency_limit(f"ceiling-{queue}", queue=queue, max_concurrent=10_000,
                                       on_saturated="queue")


def _in_loops(work: Callable[[int], None]) -> None:
    """work(i) for each of the --loops loops: inline for one, else each on a thread."""
    if LOOPS == 1:
        work(0)
        return
    threads = [threading.Thread(target=work, args=(i,)) for i in range(LOOPS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def single_enqueue(store: Store, n: int, policies: bool) -> float:
    client = Client(store)
    envs = envelopes(n, policies)
    errors: list[BaseException] = []

    def produce(part: list[Envelope]) -> None:
        try:
            for env in part:
                client.enqueue_many([env])
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    start = time.perf_counter()
    _in_loops(lambda i: produce(envs[i::LOOPS]))
    if errors:
        raise errors[0]
    return n / (time.perf_counter() - start)


def batch_enqueue(store: Store, n: int, policies: bool) -> float:
    client = Client(store)
    envs = envelopes(n, policies)
    start = time.perf_counter()
    for i in range(0, n, BATCH):
        client.enqueue_many(envs[i : i + BATCH])
    return n / (time.perf_counter() - start)


def admit_ack(store: Store, n: int, policies: bool) -> float:
    _fill(store, n, policies)
    done = 0
    start = time.perf_counter()
    while done < n:
        claims = store.admit("bench-worker", [QUEUE], capacity=CAPACITY, lease_ms=60_000)
        if not claims:
            raise RuntimeError(f"admit returned nothing with {n - done} jobs left")
        for claim in claims:
            store.ack(claim, Outcome.SUCCESS)
        done += len(claims)
    return _finish(store, n, start)


def _fill(store: Store, n: int, policies: bool) -> None:
    client = Client(store)
    envs = envelopes(n, policies)
    for i in range(0, n, BATCH):
        client.enqueue_many(envs[i : i + BATCH])


def _finish(store: Store, n: int, start: float) -> float:
    elapsed = time.perf_counter() - start
    # Job i went to QUEUES[i % len(QUEUES)] (envelopes).
    wanted = [len(range(q, n, len(QUEUES))) for q in range(len(QUEUES))]
    completed = [store.counts(queue)["completed"] for queue in QUEUES]
    if completed != wanted:
        raise RuntimeError(f"expected {wanted} completed in {QUEUES}, the store counts {completed}")
    return n / elapsed


def admit_ack_many(store: Store, n: int, policies: bool) -> float:
    from headgate.core.job import AckRequest

    _fill(store, n, policies)
    done = 0
    start = time.perf_counter()
    while done < n:
        claims = store.admit("bench-worker", [QUEUE], capacity=CAPACITY, lease_ms=60_000)
        if not claims:
            raise RuntimeError(f"admit returned nothing with {n - done} jobs left")
        lost = store.ack_many([AckRequest(c, Outcome.SUCCESS.value) for c in claims])  # type: ignore[attr-defined]
        if lost:
            raise RuntimeError(f"{len(lost)} leases lost")
        done += len(claims)
    return _finish(store, n, start)


def ack_and_admit(store: Store, n: int, policies: bool) -> float:
    from headgate.core.job import AckRequest

    _fill(store, n, policies)
    done = [0] * LOOPS
    errors: list[BaseException] = []

    def loop(i: int) -> None:
        claims: list = []
        try:
            while True:
                acks = [AckRequest(c, Outcome.SUCCESS.value) for c in claims]
                lost, claims = store.ack_and_admit(  # type: ignore[attr-defined]
                    acks, f"bench-worker-{i}", [QUEUES[i % len(QUEUES)]], CAPACITY,
                    lease_ms=60_000)
                if lost:
                    raise RuntimeError(f"{len(lost)} leases lost")
                done[i] += len(acks)
                if not claims:
                    return
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    start = time.perf_counter()
    _in_loops(loop)
    if errors:
        raise errors[0]
    if sum(done) != n:
        raise RuntimeError(f"acked {sum(done)} of {n}")
    return _finish(store, n, start)


METRICS: dict[str, Callable[[Store, int, bool], float]] = {
    "single_enqueue": single_enqueue,
    "batch_enqueue": batch_enqueue,
    "admit_ack": admit_ack,
    "admit_ack_many": admit_ack_many,
    "ack_and_admit": ack_and_admit,
}
# Metrics that need a store method beyond the issue-2 surface.
NEEDS = {"admit_ack_many": "ack_many", "ack_and_admit": "ack_and_admit"}


def run_once(fresh: Callable[[], contextlib.AbstractContextManager[str]], metric: str,
             n: int, policies: bool, profile: bool = False) -> float:
    with fresh() as url:
        store = headgate.open_store(url)
        try:
            if policies:
                install_policies(store)
            if not profile:
                return METRICS[metric](store, n, policies)
            prof = cProfile.Profile()
            prof.enable()
            rate = METRICS[metric](store, n, policies)
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(35)
            out.write("\n-- by own time --\n")
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
            print(out.getvalue(), file=sys.stderr)
            return rate
        finally:
            store.close()


def main(argv: list[str] | None = None) -> int:
    global CAPACITY, PARTITIONS, LOOPS, QUEUES
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="jobs per run (default 20000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per metric (default 3)")
    parser.add_argument("--store", choices=("sqlite", "pg"), default="sqlite")
    parser.add_argument("--metric", choices=sorted(METRICS), action="append",
                        help="only these metrics (repeatable; default all)")
    parser.add_argument("--variant", choices=("plain", "policies"), action="append",
                        help="only these variants (repeatable; default both)")
    parser.add_argument("--capacity", type=int, default=CAPACITY,
                        help=f"admit capacity per call (default {CAPACITY}; a W3 worker: 2)")
    parser.add_argument("--partitions", type=int, default=PARTITIONS,
                        help=f"partitions of the policies variant (default {PARTITIONS})")
    parser.add_argument("--loops", type=int, default=1,
                        help="ack_and_admit loops, or single_enqueue threads (default 1)")
    parser.add_argument("--queues", type=int, default=1,
                        help="queues the jobs are spread over; --loops a multiple of it")
    parser.add_argument("--profile", choices=sorted(METRICS),
                        help="profile one run of METRIC with cProfile (to stderr) and exit")
    args = parser.parse_args(argv)
    if min(args.n, args.runs, args.capacity, args.partitions, args.loops, args.queues) < 1:
        parser.error("--n, --runs, --capacity, --partitions, --loops and --queues must be >= 1")
    if args.loops % args.queues:
        parser.error("--loops must be a multiple of --queues (each queue needs its loops)")
    if args.loops > 1 or args.queues > 1:
        threaded = {"ack_and_admit", "single_enqueue"}
        if args.profile or any(m not in threaded for m in args.metric or []):
            parser.error("--loops and --queues apply to the ack_and_admit and "
                         "single_enqueue metrics only")
        args.metric = args.metric or ["ack_and_admit"]
    CAPACITY, PARTITIONS, LOOPS = args.capacity, args.partitions, args.loops
    QUEUES = [QUEUE] if args.queues == 1 else [f"{QUEUE}-{i}" for i in range(args.queues)]
    fresh = check_backend(args.store)
    variants = args.variant or ["plain", "policies"]

    if args.profile:
        for variant in variants:
            rate = run_once(fresh, args.profile, args.n, variant == "policies", profile=True)
            print(json.dumps({"metric": args.profile, "variant": variant, "profiled": True,
                              "jobs_per_s": round(rate)}))
        return 0

    for metric in args.metric or list(METRICS):
        needed = NEEDS.get(metric)
        if needed and not hasattr(headgate.Store, needed):
            print(json.dumps({"metric": metric, "skipped": f"store has no {needed}"}))
            continue
        for variant in variants:
            rates = [run_once(fresh, metric, args.n, variant == "policies")
                     for _ in range(args.runs)]
            print(json.dumps({
                "metric": metric,
                "variant": variant,
                "store": args.store,
                "n": args.n,
                "capacity": CAPACITY,
                "loops": LOOPS,
                "queues": len(QUEUES),
                "partitions": PARTITIONS if variant == "policies" else None,
                "runs": args.runs,
                "unit": "jobs/s",
                "median": round(statistics.median(rates)),
                "min": round(min(rates)),
                "max": round(max(rates)),
            }), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
