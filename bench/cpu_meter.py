"""CPU per job beside the peer harness's throughput, read from /proc around each timed window.

    PY bench/cpu_meter.py [--postmaster PID] SCRIPT [ARGS...]    (what bench/compare.sh runs)
    .venv/bin/python bench/cpu_meter.py --find-postmaster URL      (prints the server's pid)

SCRIPT is a harness bench script (bench/peers_headgate.py or a peer's bench_<peer>.py);
it runs in this interpreter as `PY SCRIPT ARGS` would, after the harness's own functions
(its common.py, imported from where the script imports it, never edited) are wrapped so
that the JSON line of W1, W2 and W3 gains `cpu_us_per_job` = {client, worker, server,
total}: CPU microseconds per job, each a median/min/max/runs over the runs like the
jobs/s beside it. The wrapping is the same for headgate and every peer, so their figures
compare.

The windows are the ones the jobs/s figure times:
- W1: the timed loop of single enqueues (not the reset, the connection or the warm-up);
- W2: the timed loop of batches;
- W3: the worker's launch to the N-th side effect (not the pre-enqueue, not the grace
  second after). `cpu_us_per_job_after_first` is the same window from the first side
  effect on, per N - 1 jobs: without the worker's start-up, as `after_first_job`.
W4 (an idle worker's latency) has none.

The parts:
- client: this process (the producer; getrusage, so threads and reaped children count)
  and any live descendant that is not the worker's. In W3 the bench only polls for the
  side-effect file, the same loop for every row: it is `harness` there, not in the total.
- worker: the worker process and its descendants (by parent and by its session): each
  one's own CPU plus the cutime/cstime of the children it reaped.
- server (`--postmaster`, PostgreSQL rows): the postmaster and all its children, each's
  own CPU plus its reaped children's, read before and after the window; backends that
  exit inside it arrive in the postmaster's cutime/cstime. This is the whole cluster:
  it must serve nobody else meanwhile.
- total: client + worker + server (W3: worker + server).

A process's own CPU is the larger of its utime+stime (clock ticks, truncated) and the sum
of its live threads' run time in /proc/PID/task/*/schedstat (nanoseconds; misses threads
that ended): each a lower bound, the larger the nearer. Reading at the window's two ends
suffices because a process that ends inside it is counted by the parent that reaps it;
only one orphaned inside the window (its parent gone first) would be missed.
"""

from __future__ import annotations

import os
import resource
import runpy
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")
MARK = "_hg_cpu_meter"  # set on the harness module once it is wrapped


@dataclass
class Proc:
    pid: int
    ppid: int
    session: int
    own_ticks: int  # utime + stime
    reaped_ticks: int  # cutime + cstime


def read_procs() -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue  # gone meanwhile
        # Fields after the command (which may hold spaces and parentheses): state, ppid,
        # pgrp, session, ... utime is the 14th field of the line, cstime the 17th.
        rest = data[data.rindex(b")") + 2:].split()
        procs[int(name)] = Proc(int(name), int(rest[1]), int(rest[3]),
                                int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14]))
    return procs


def own_ns(proc: Proc) -> float:
    run_ns = 0
    try:
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            with open(f"/proc/{proc.pid}/task/{tid}/schedstat") as f:
                run_ns += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        run_ns = 0
    return max(proc.own_ticks * TICK_NS, float(run_ns))


def tree(procs: dict[int, Proc], root: int, *, session: bool = False) -> set[int]:
    """root and its descendants (and, with session, every process of root's session)."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found = {root} if root in procs else set()
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    if session:
        found |= {p.pid for p in procs.values() if p.session == root}
    return found


def cpu_ns(procs: dict[int, Proc], pids: set[int]) -> float:
    return sum(own_ns(procs[p]) + procs[p].reaped_ticks * TICK_NS for p in pids if p in procs)


def self_ns() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return (me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime) * 1e9


@dataclass
class Snap:
    client: float
    worker: float | None
    server: float | None


class Meter:
    def __init__(self, common: ModuleType, postmaster: int | None) -> None:
        self.common = common
        self.postmaster = postmaster
        self.workload: str | None = None
        self.n = 0
        self.runs: dict[str, list[dict[str, float | None] | None]] = {}
        self.after_first: list[dict[str, float | None] | None] = []
        self._worker_pid = 0
        self._start: Snap | None = None
        self._first: Snap | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- reading ----------------------------------------------------------------------
    def snapshot(self, worker_pid: int = 0, *, client_first: bool = False) -> Snap:
        # The scan itself costs this process a few ms: read its own CPU before the scan
        # at a window's end and after it at a start, so the window holds none of it.
        client = self_ns() if client_first else 0.0
        procs = read_procs()
        workers = tree(procs, worker_pid, session=True) if worker_pid else set()
        me = os.getpid()
        others = tree(procs, me) - workers - {me}
        server = (cpu_ns(procs, tree(procs, self.postmaster))
                  if self.postmaster else None)
        worker = cpu_ns(procs, workers) if worker_pid else None
        if not client_first:
            client = self_ns()
        return Snap(client + cpu_ns(procs, others), worker, server)

    def record(self, s0: Snap, s1: Snap, n: int, *, drain: bool) -> dict[str, float | None]:
        def per_job(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else (b - a) / 1e3 / max(n, 1)

        client = per_job(s0.client, s1.client)
        worker = per_job(s0.worker if s0.worker is not None else 0.0, s1.worker)
        server = per_job(s0.server, s1.server)
        if drain:  # the bench only waits: not a client of the drain
            parts = [worker, server]
            rec = {"harness": client, "worker": worker, "server": server}
        else:
            parts = [client, server]
            rec = {"client": client, "server": server}
        rec["total"] = sum(p for p in parts if p is not None)
        return rec

    # -- W1/W2: the timed loop --------------------------------------------------------
    def timed(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        s0 = self.snapshot()
        try:
            return fn(arg)
        finally:
            s1 = self.snapshot(client_first=True)
            assert self.workload is not None
            self.runs.setdefault(self.workload, []).append(
                self.record(s0, s1, self.n, drain=False))

    def wrap_peer(self, peer: Any) -> None:
        single, batch = peer.single_loop, peer.batch_loop

        def single_loop(ids: Any) -> Any:
            # W1's timed call is range(n); its warm-up starts below 0.
            if self.workload == "W1" and isinstance(ids, range) and ids.start == 0:
                return self.timed(single, ids)
            return single(ids)

        def batch_loop(batches: Any) -> Any:
            # W2's timed call gets a generator; its warm-up a list of one batch.
            if self.workload == "W2" and not isinstance(batches, list):
                return self.timed(batch, batches)
            return batch(batches)

        peer.single_loop, peer.batch_loop = single_loop, batch_loop

    # -- W3: launch -> N-th side effect -----------------------------------------------
    def drain_started(self, s0: Snap, pid: int, drain_file: str | None) -> None:
        self._start, self._first, self._worker_pid = s0, None, pid
        self._stop.clear()
        if drain_file:
            self._watcher = threading.Thread(target=self._watch, args=(drain_file,),
                                             daemon=True)
            self._watcher.start()

    def _watch(self, path: str) -> None:
        while not self._stop.is_set():
            try:
                if os.stat(path).st_size:
                    self._first = self.snapshot(self._worker_pid)
                    return
            except FileNotFoundError:
                pass
            self._stop.wait(0.002)

    def drain_ended(self, done: bool) -> None:
        s1 = self.snapshot(self._worker_pid, client_first=True) if done else None
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
        self._watcher = None
        if s1 is None or self._start is None:
            self.runs.setdefault("W3", []).append(None)
            self.after_first.append(None)
        else:
            self.runs.setdefault("W3", []).append(
                self.record(self._start, s1, self.n, drain=True))
            self.after_first.append(None if self._first is None else
                                    self.record(self._first, s1, self.n - 1, drain=True))
        self._start = None

    # -- the JSON lines ---------------------------------------------------------------
    def summary(self, recs: list[dict[str, float | None] | None]) -> dict[str, Any]:
        keys = [k for k in ("client", "harness", "worker", "server", "total")
                if any(r is not None and r.get(k) is not None for r in recs)]
        return {k: self.common.agg([None if r is None else r.get(k) for r in recs])
                for k in keys}

    def annotate(self, obj: dict[str, Any]) -> dict[str, Any]:
        wl = obj.get("workload")
        recs = self.runs.pop(wl, None) if isinstance(wl, str) else None
        if not recs or "peer" not in obj:
            return obj
        obj = {**obj, "cpu_us_per_job": self.summary(recs)}
        if wl == "W3":
            obj["cpu_us_per_job_after_first"] = self.summary(self.after_first)
            self.after_first = []
        obj["cpu_meter"] = {"postmaster": self.postmaster, "window": {
            "W1": "timed single-enqueue loop", "W2": "timed batch loop",
            "W3": "worker launch -> N-th side effect"}[wl]}
        return obj

    # -- wrapping the harness ---------------------------------------------------------
    def install(self) -> None:
        c = self.common
        orig = {name: getattr(c, name) for name in
                ("main", "w1", "w2", "w3", "emit", "wait_file_size", "WorkerProc")}
        meter = self

        def main(peer: Any, *a: Any, **kw: Any) -> Any:
            meter.wrap_peer(peer)
            return orig["main"](peer, *a, **kw)

        def workload(name: str) -> Callable[..., Any]:
            def run(peer: Any, args: Any, *a: Any) -> Any:
                meter.workload, meter.n = name, args.n
                before = len(meter.runs.get(name, []))
                try:
                    return orig[name.lower()](peer, args, *a)
                finally:
                    if meter._start is not None:  # launched, never saw the N-th job
                        meter.drain_ended(False)
                    meter.workload = None
                    if len(meter.runs.get(name, [])) == before:  # no window at all
                        meter.runs.setdefault(name, []).append(None)
                        if name == "W3":
                            meter.after_first.append(None)
            return run

        class WorkerProc(orig["WorkerProc"]):  # type: ignore[misc,valid-type]
            def __init__(self, argv: Any, env: dict[str, str], *a: Any, **kw: Any) -> None:
                drain = meter.workload == "W3"
                s0 = meter.snapshot() if drain else None
                super().__init__(argv, env, *a, **kw)
                if s0 is not None:
                    meter.drain_started(s0, self.p.pid, env.get("BENCH_DRAIN_FILE"))

        def wait_file_size(*a: Any, **kw: Any) -> Any:
            res = orig["wait_file_size"](*a, **kw)
            if meter.workload == "W3" and meter._start is not None:
                meter.drain_ended(res[1] is not None)
            return res

        def emit(obj: Any) -> Any:
            return orig["emit"](meter.annotate(obj) if isinstance(obj, dict) else obj)

        c.main, c.w1, c.w2, c.w3 = main, workload("W1"), workload("W2"), workload("W3")
        c.WorkerProc, c.wait_file_size, c.emit = WorkerProc, wait_file_size, emit
        setattr(c, MARK, self)


def install(common: ModuleType, postmaster: int | None) -> Meter:
    """Wrap the harness module once (bench/compare.sh's wrapper or a script's own flag)."""
    meter = getattr(common, MARK, None)
    if meter is None:
        meter = Meter(common, postmaster)
        meter.install()
    return meter


def find_postmaster(url: str) -> int:
    """The postmaster of the server at url: the parent of this connection's backend."""
    import psycopg

    with psycopg.connect(url, connect_timeout=10) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        backend = int(row[0]) if row else 0
        procs = read_procs()  # while the backend lives
    if backend not in procs:
        raise LookupError(f"backend {backend} of {url} is not a process of this machine")
    return procs[backend].ppid


def harness_dir(script: str) -> str:
    """Where SCRIPT imports common.py from: its own folder (a peer's bench_<peer>.py), else
    HG_PEERS_DIR or ../shared/peers beside the checkout (bench/peers_headgate.py)."""
    here = os.path.dirname(script)
    if os.path.exists(os.path.join(here, "common.py")):
        return here
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.abspath(os.environ.get("HG_PEERS_DIR")
                           or os.path.join(os.path.dirname(root), "shared", "peers"))


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]) or not argv:
        print("usage: cpu_meter.py [--postmaster PID] SCRIPT [ARGS...]\n"
              "       cpu_meter.py --find-postmaster URL\n\n" + (__doc__ or ""))
        return 0 if argv else 2
    if argv[0] == "--find-postmaster":
        try:
            print(find_postmaster(argv[1]))
        except Exception as exc:  # any failure: no server CPU, said in one line
            why = " ".join(str(exc).split())  # one line, whatever the driver says
            print(f"cpu_meter: no postmaster for {argv[1]}: {why}", file=sys.stderr)
            return 1
        return 0
    postmaster = None
    if argv[0] == "--postmaster":
        postmaster, argv = int(argv[1]), argv[2:]
        if not os.path.exists(f"/proc/{postmaster}/stat"):
            print(f"cpu_meter: no process {postmaster}", file=sys.stderr)
            return 1
    script = os.path.abspath(argv[0])
    peers = harness_dir(script)
    if not os.path.exists(os.path.join(peers, "common.py")):
        print(f"cpu_meter: the peer harness (common.py) is not in {peers}", file=sys.stderr)
        return 1
    # As `python SCRIPT`: its folder first on the path (not bench/, whose http.py would
    # stand in for the standard library's), the harness importable as the script will.
    sys.path[0] = os.path.dirname(script)
    sys.path.insert(1, peers)
    import common  # type: ignore[import-not-found]

    install(common, postmaster)
    sys.argv = [script, *argv[1:]]
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
