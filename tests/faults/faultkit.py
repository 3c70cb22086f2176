"""Helpers of the fault-injection suite: real `headgate worker` / `headgate serve`
processes started by CLI, killed by PID only, and the checks every scenario ends with.

Nothing here kills by name or process group: a worker is one PID; a `serve` is a
gunicorn master and its one worker child, both addressed by PID (the child found with
`ps --ppid <master>`).

The worker app the processes run is `fault_app.py` beside this file; it appends one
line per handler start and end to `$HG_FAULT_DIR/effects.log` (O_APPEND, one write per
line), which `read_effects` parses.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import headgate_cmd, pg_ctl, wait_for  # noqa: F401 - re-exported for the fault tests

import headgate
from headgate import Job, JobFilter, State, Store

FAULTS_DIR = Path(__file__).resolve().parent
APP = "fault_app:make_worker"
TERMINAL = {"completed", "archived", "cancelled", "quarantined", "undecodable"}
LIVE = {"pending", "scheduled", "available", "running", "retryable"}


# -- processes -------------------------------------------------------------------------

def child_env(fault_dir: Path, **extra: str) -> dict[str, str]:
    """The parent's environment without HG_* settings (the CLI gets --store), with the
    fault app importable and its side-effect directory set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["HG_FAULT_DIR"] = str(fault_dir)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(FAULTS_DIR), os.environ.get("PYTHONPATH", "")] if p)
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True, check=False).stdout
    return {int(p) for p in out.split()}


def tcp_ports(pid: int) -> set[int]:
    """The local ports of a process's TCP sockets (Linux /proc): on PostgreSQL, the
    `client_port` of its sessions in pg_stat_activity."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)  # the header
            for line in f:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def sessions_on(store_url: str, ports: set[int]) -> int:
    """How many PostgreSQL sessions have one of these client ports: a killed client's
    session ends only once the statement it sent has finished (and committed)."""
    with psycopg.connect(store_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)",
                           (list(ports),)).fetchone()
    return int(row[0]) if row else 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- processes ---------------------------------------------------------------------------

class Proc:
    """A child process with its output in a log file."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path,
                 cwd: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        self.killed = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL this PID: no handler runs, no lease is released."""
        if self.running():
            os.kill(self.pid, signal.SIGKILL)
            self.killed = True
        self.proc.wait(10)

    def term(self, timeout: float = 30) -> int:
        if self.running():
            os.kill(self.pid, signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.log_path.name} still running; log tail:\n"
                                 f"{self.tail()}") from None

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def close(self) -> None:
        if self.running():
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()


class WorkerProc(Proc):
    """`headgate worker --app fault_app:make_worker --store URL ...`."""

    def __init__(self, store_url: str, fault_dir: Path, name: str, args: Iterable[str],
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        argv = [*headgate_cmd(), "worker", "--app", APP, "--store", store_url,
                "--worker-id", name, *args]
        super().__init__(argv, env or child_env(fault_dir), fault_dir / f"{name}.log",
                         fault_dir)


class ServeProc(Proc):
    """`headgate serve --addr 127.0.0.1:PORT --store URL`: a gunicorn master and one
    worker child, which holds the store, the API and the duties."""

    def __init__(self, store_url: str, fault_dir: Path, name: str, args: Iterable[str] = ()
                 ) -> None:
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        argv = [*headgate_cmd(), "serve", "--addr", f"127.0.0.1:{self.port}",
                "--store", store_url, "--threads", "4", *args]
        super().__init__(argv, child_env(fault_dir), fault_dir / f"{name}.log", fault_dir)

    def wait_healthy(self, timeout: float = 30) -> None:
        def up() -> bool:
            if not self.running():
                raise AssertionError(f"serve exited early:\n{self.tail()}")
            try:
                return http(self.base + "/healthz", timeout=1)[0] == 200
            except OSError:
                return False
        wait_for(up, timeout, f"{self.name} to answer /healthz", interval=0.1)

    def worker_pids(self) -> set[int]:
        return children(self.pid)

    def kill9(self) -> None:
        """kill -9 of the whole server, by PID: the master is stopped first (so it
        neither respawns a worker nor lets the worker notice it and step down
        gracefully), then the worker and the master are SIGKILLed."""
        if not self.running():
            return
        os.kill(self.pid, signal.SIGSTOP)
        for pid in self.worker_pids():
            os.kill(pid, signal.SIGKILL)
        os.kill(self.pid, signal.SIGKILL)
        self.killed = True
        self.proc.wait(10)

    def close(self) -> None:
        workers = self.worker_pids() if self.running() else set()
        if self.running():
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(10)
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._log.close()


@dataclass
class Fleet:
    """Every process a test started; `close()` ends them (by PID) at teardown."""

    store_url: str
    fault_dir: Path
    procs: list[Proc] = field(default_factory=list)

    def worker(self, name: str, *args: str, env: dict[str, str] | None = None
               ) -> WorkerProc:
        proc = WorkerProc(self.store_url, self.fault_dir, name, args, env)
        self.procs.append(proc)
        return proc

    def serve(self, name: str, *args: str) -> ServeProc:
        proc = ServeProc(self.store_url, self.fault_dir, name, args)
        self.procs.append(proc)
        proc.wait_healthy()
        return proc

    def close(self) -> None:
        for proc in self.procs:
            try:
                proc.close()
            except Exception:  # noqa: BLE001 - teardown: end the others too
                pass


@pytest.fixture(name="fleet")
def fleet_fixture(store_url: str, tmp_path: Path) -> Iterator[Fleet]:
    """`fleet`: the processes a test starts, ended at teardown. The test modules that
    drive a fleet import this fixture."""
    fleet = Fleet(store_url, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()


# -- HTTP ---------------------------------------------------------------------------------

def http(url: str, method: str = "GET", body: Any = None, timeout: float = 30,
         headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    """(status, body text, headers) — HTTP errors are answers, not exceptions."""
    data = None
    hdrs = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace"), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace"), dict(err.headers)


def api_enqueue(base: str, kind: str, payload: bytes, key: str, **fields: Any
                ) -> tuple[int, str, dict[str, str]]:
    import base64

    body = {"kind": kind, "payload": base64.b64encode(payload).decode(), **fields}
    return http(base + "/api/v1/jobs", "POST", body, headers={"Idempotency-Key": key})


# -- PostgreSQL cluster control ------------------------------------------------------------

def pg_cluster_available() -> bool:
    return bool(os.environ.get("HG_TEST_PG_DATA") and os.environ.get("HG_TEST_PG_BIN"))


def pg_stop() -> None:
    pg_ctl("stop", "-m", "fast", "-w")


def pg_start() -> None:
    log = os.path.join(os.path.dirname(os.environ["HG_TEST_PG_DATA"]), "postgres.log")
    pg_ctl("start", "-w", "-l", log)


# -- side effects --------------------------------------------------------------------------

@dataclass(frozen=True)
class Effect:
    event: str  # "start" or "end"
    job_id: str
    fence: int
    outcome: str  # "" for start
    pid: int


def iter_effects(fault_dir: Path) -> Iterator[Effect]:
    """The side-effect file's lines, streamed (a 1M-job soak writes ~2.7M of them)."""
    path = fault_dir / "effects.log"
    if not path.exists():
        return
    with path.open() as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 4 and parts[0] == "start":
                yield Effect("start", parts[1], int(parts[2]), "", int(parts[3]))
            elif len(parts) == 5 and parts[0] == "end":
                yield Effect("end", parts[1], int(parts[2]), parts[3], int(parts[4]))
            # A line torn by a SIGKILL mid-write cannot happen (one write(2) per line,
            # O_APPEND), and an unparsable one would show up as a missing effect.


def read_effects(fault_dir: Path) -> list[Effect]:
    return list(iter_effects(fault_dir))


def effects_size(fault_dir: Path) -> int:
    """Bytes in the side-effect file: grows with every handler run (cheap progress)."""
    try:
        return (fault_dir / "effects.log").stat().st_size
    except FileNotFoundError:
        return 0


def ends(fault_dir: Path) -> int:
    return sum(1 for e in read_effects(fault_dir) if e.event == "end")


# -- the store's view -----------------------------------------------------------------------

def all_jobs(store: Store, queue: str | None = None) -> list[Job]:
    jobs: list[Job] = []
    cursor: str | None = None
    while True:
        page = store.list_jobs(JobFilter(queue=queue), cursor=cursor, limit=200)
        jobs.extend(page.jobs)
        if page.next_cursor is None:
            return jobs
        cursor = page.next_cursor


def jobs_in(store: Store, state: str, queue: str | None = None) -> list[Job]:
    jobs: list[Job] = []
    cursor: str | None = None
    while True:
        page = store.list_jobs(JobFilter(queue=queue, state=state), cursor=cursor, limit=200)
        jobs.extend(page.jobs)
        if page.next_cursor is None:
            return jobs
        cursor = page.next_cursor


def unfinished(store: Store, queue: str | None = None) -> int:
    counts = store.counts(queue)
    return sum(counts.get(s, 0) for s in LIVE)


@dataclass
class Audit:
    """What the end of a scenario found: the figures RELIABILITY.md reports."""

    jobs: int
    runs: int  # handler runs that started (every attempt, re-runs included)
    terminal: dict[str, int]
    lost: int
    completed: int
    duplicate_completions: int  # completed jobs whose successful run was recorded twice
    reruns: int  # runs beyond one per job that ended in a success line (at-least-once)
    crash_reclaims: int
    problems: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs, "runs": self.runs, "terminal": self.terminal, "lost": self.lost,
            "completed": self.completed, "duplicate_completions": self.duplicate_completions,
            "reruns": self.reruns, "crash_reclaims": self.crash_reclaims,
        }


def audit(store: Store, ids: Iterable[str], fault_dir: Path,
          revoked: Iterable[str] = ()) -> Audit:
    """Every enqueued id is in a terminal state (or deleted by its own `revoke`); every
    completed job's completing run — the fence the store kept — left exactly one
    `end ... ok` line; a success line of any other fence was a re-run of a killed or
    lease-lost attempt (at-least-once), never a second completion; and the maintained
    counters equal a recount of the rows."""
    ids = list(ids)
    revoked_set = set(revoked)
    rows = {j.id: j for j in all_jobs(store)}
    problems: list[str] = []
    lost = [i for i in ids if i not in rows and i not in revoked_set]
    if lost:
        problems.append(f"{len(lost)} job(s) lost, e.g. {lost[:3]}")
    states = Counter(rows[i].state.value for i in ids if i in rows)
    not_terminal = {s: n for s, n in states.items() if s not in TERMINAL}
    if not_terminal:
        problems.append(f"jobs not terminal: {not_terminal}")

    ok_lines: dict[str, list[Effect]] = defaultdict(list)
    wanted = set(ids)
    runs = 0
    for e in iter_effects(fault_dir):
        if e.event == "end" and e.outcome == "ok":
            ok_lines[e.job_id].append(e)
        elif e.event == "start" and e.job_id in wanted:
            runs += 1
    completed = [rows[i] for i in ids if i in rows and rows[i].state is State.COMPLETED]
    duplicates = 0
    reruns = 0
    for job in completed:
        lines = ok_lines.get(job.id, [])
        final = [e for e in lines if e.fence == job.fence]
        if len(final) != 1:
            problems.append(f"job {job.id}: {len(final)} success line(s) for its "
                            f"completing fence {job.fence}")
        fences = Counter(e.fence for e in lines)
        if any(n > 1 for n in fences.values()):
            duplicates += 1
            problems.append(f"job {job.id}: one fence ended twice: {fences}")
        reruns += len(lines) - 1 if lines else 0
        result = store.get_result(job.id)
        if result is not None and result.bytes != f"fence={job.fence}".encode():
            duplicates += 1
            problems.append(f"job {job.id}: result {result.bytes!r} was written by a "
                            f"stale fence (store fence {job.fence})")

    recount = Counter(j.state.value for j in rows.values())
    counts = {s: n for s, n in store.counts().items() if n}
    if counts != dict(recount):
        problems.append(f"counters {counts} != recount {dict(recount)}")
    return Audit(
        jobs=len(ids), runs=runs, terminal=dict(states), lost=len(lost),
        completed=len(completed),
        duplicate_completions=duplicates, reruns=reruns,
        crash_reclaims=sum(rows[i].crash_attempt for i in ids if i in rows),
        problems=problems,
    )


# -- figures for docs/RELIABILITY.md ---------------------------------------------------------

FIGURES_ENV = "HG_RELIABILITY_OUT"


def record(scenario: str, backend: str, **figures: Any) -> None:
    """Append one scenario's figures (JSON line) to $HG_RELIABILITY_OUT when set;
    `bench/reliability.py` runs the suite with it and renders the table."""
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    row = {"scenario": scenario, "backend": backend, **figures}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, sort_keys=True) + "\n")


def backend_of(store_url: str) -> str:
    return "sqlite" if store_url.startswith("sqlite:") else "pg"


def enqueue_fx(store: Store, n: int, *, queue: str = "default", ms: int = 0,
               outcome: str = "ok", **extra: Any) -> list[str]:
    """`n` jobs of the fault app's `fx` kind (unique payloads, so unique fingerprints)."""
    nonce = uuid.uuid4().hex[:8]
    envs = [headgate.Envelope(kind="fx", queue=queue, payload=json.dumps(
        {"i": i, "n": nonce, "o": outcome, "ms": ms}).encode(), **extra) for i in range(n)]
    ids: list[str] = []
    client = headgate.Client(store)
    for start in range(0, n, 1000):
        ids += client.enqueue_many(envs[start:start + 1000])
    return ids
