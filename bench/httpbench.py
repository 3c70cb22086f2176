"""Producers over HTTP: `POST /api/v1/jobs` on `headgate serve` against its ceiling.

    .venv/bin/python bench/http.py [--stores sqlite,pg] [--runs 3] [--seconds 8]
        [--connections 8] [--pg-url postgresql://…/postgres]

The ceiling: what the same server configuration answers for a trivial JSON
POST route. It is started by `headgate.services.server.run_gunicorn` with the options
`headgate.services.server.gunicorn_options` gives `headgate serve`, serving a three-line Flask app
(`POST /api/v1/jobs`: parse the JSON body, answer 201 with a small JSON object) with
duties off, so the gunicorn options (one process, gthread, 16 threads, timeouts) are the
very ones serve builds, whatever they become. headgate is `headgate serve --addr …
--threads 16 --store URL` with its defaults (duties on), on a fresh SQLite file or a
fresh PostgreSQL database per run.

Load: `wrk` (Debian package; installed with apt-get if missing) with `--connections`
(8) keep-alive connections on 2 threads for `--seconds` (8) per run, every request with
a unique Idempotency-Key (bench/http_post.lua) and the body
{"kind": "bench.http", "payload": "eyJuIjogMX0=", "queue": "http"}. A run counts only
2xx answers: requests/s = (requests - non-2xx) / duration. The rows take turns run by
run (ceiling, sqlite, pg, ceiling, ...) so a noisy minute falls on all of them. One JSON
line per row: median and min–max req/s and p50/p99 latency (wrk's), then one line of
ratios to the ceiling (the issue's target: >= 0.7).

`--processes N` (N > 1) runs every server with N gunicorn worker processes, for when
`headgate serve --processes` exists; without it that row is reported as skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SRC = os.path.abspath(os.environ.get("HG_SRC") or ROOT)
LUA = HERE / "http_post.lua"
BODY = '{"kind": "bench.http", "payload": "eyJuIjogMX0=", "queue": "http"}'


# -- the ceiling server (runs in its own process: `http.py --ceiling-server ADDR`) --------

def ceiling_server(addr: str, threads: int, processes: int) -> None:
    """headgate's gunicorn configuration serving a trivial JSON POST route."""
    import flask

    from headgate.services import server
    from headgate.services.config import Settings

    def create_app() -> flask.Flask:
        app = flask.Flask("ceiling")

        @app.post("/api/v1/jobs")
        def post() -> tuple[flask.Response, int]:
            body = flask.request.get_json()
            return flask.jsonify({"id": uuid.uuid4().hex, "kind": body["kind"]}), 201

        @app.get("/readyz")
        def ready() -> str:
            return "ok"

        return app

    config = server.ServerConfig(Settings(api_addr=addr), threads=threads, duties=False)
    options = server.gunicorn_options(config)
    if processes > 1:
        options["workers"] = processes
    raise SystemExit(server.run_gunicorn(options, create_app))


# -- orchestration ------------------------------------------------------------------------

def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    print(json.dumps({"note": "installing wrk with apt-get"}), file=sys.stderr)
    for cmd in (["apt-get", "install", "-y", "wrk"], ["apt-get", "update"],
                ["apt-get", "install", "-y", "wrk"]):
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if shutil.which("wrk"):
            break
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("http: wrk is not installed and apt-get could not install it")
    return found


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(proc: subprocess.Popen[bytes], base: str, timeout: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited during start-up ({proc.returncode})")
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become ready")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@contextlib.contextmanager
def fresh_store(kind: str, pg_url: str) -> Iterator[str]:
    if kind == "sqlite":
        tmp = tempfile.mkdtemp(prefix="hg-http-")
        try:
            yield f"sqlite:///{tmp}/http.db"
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    import psycopg

    name = f"hg_http_{os.getpid()}"
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(pg_url, name)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def headgate_cmd() -> list[str]:
    script = Path(sys.executable).with_name("headgate")
    return [str(script)] if script.exists() else [sys.executable, "-m", "headgate.cli"]


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env


@contextlib.contextmanager
def server(row: str, threads: int, processes: int, pg_url: str, log: Path
           ) -> Iterator[tuple[str, subprocess.Popen[bytes], str | None]]:
    """Start one row's server; yields its base URL, process and store URL."""
    port = free_port()
    addr = f"127.0.0.1:{port}"
    with contextlib.ExitStack() as stack:
        store: str | None = None
        if row == "ceiling":
            argv = [sys.executable, str(HERE / "http.py"), "--ceiling-server", addr,
                    "--threads", str(threads), "--processes", str(processes)]
        else:
            store = stack.enter_context(fresh_store(row, pg_url))
            argv = [*headgate_cmd(), "serve", "--addr", addr, "--threads", str(threads),
                    "--store", store, "--log-level", "WARNING"]
            if processes > 1:
                argv += ["--processes", str(processes)]
        out = stack.enter_context(open(log, "ab"))
        proc = subprocess.Popen(argv, env=server_env(), stdout=out, stderr=out,
                                start_new_session=True)
        try:
            base = f"http://{addr}"
            wait_ready(proc, base)
            yield base, proc, store
        finally:
            stop(proc)


def run_wrk(wrk: str, base: str, connections: int, seconds: float) -> dict[str, Any]:
    nonce = uuid.uuid4().hex[:12]
    done = subprocess.run(
        [wrk, "-t", "2", "-c", str(connections), "-d", f"{seconds:g}s", "--latency",
         "-s", str(LUA), base + "/api/v1/jobs", "--", nonce],
        capture_output=True, text=True, timeout=seconds + 120, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("{\"wrk\"")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    res = json.loads(line)
    ok = res["requests"] - res["non_2xx"] - res["socket_errors"]
    res["rps"] = ok / (res["duration_us"] / 1e6)
    return res


def agg(values: list[float], nd: int = 1) -> dict[str, Any]:
    return {"median": round(statistics.median(values), nd), "min": round(min(values), nd),
            "max": round(max(values), nd), "runs": [round(v, nd) for v in values]}


def serve_has_processes() -> bool:
    done = subprocess.run([*headgate_cmd(), "serve", "--help"], capture_output=True,
                          text=True, env=server_env(), check=False)
    return "--processes" in done.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--stores", default="sqlite,pg")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--threads", type=int, default=16, help="gunicorn threads (serve's 16)")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--pg-url", default=None,
                    help="server for pg (default: HG_PG, HG_TEST_PG, the harness's)")
    ap.add_argument("--ceiling-server", metavar="ADDR", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ceiling_server:
        ceiling_server(args.ceiling_server, args.threads, args.processes)
        return 0
    wrk = ensure_wrk()
    pg_url = (args.pg_url or os.environ.get("HG_PG") or os.environ.get("HG_TEST_PG")
              or "postgresql://postgres@127.0.0.1:5439/postgres")
    rows = ["ceiling", *[s.strip() for s in args.stores.split(",") if s.strip()]]
    if args.processes > 1 and not serve_has_processes():
        print(json.dumps({"bench": "http", "processes": args.processes,
                          "skipped": "headgate serve has no --processes option"}))
        return 0
    log_dir = Path(tempfile.mkdtemp(prefix="hg-http-logs-"))
    results: dict[str, list[dict[str, Any]]] = {r: [] for r in rows}
    try:
        for run in range(args.runs):
            for row in rows:
                with server(row, args.threads, args.processes, pg_url,
                            log_dir / f"{row}.log") as (base, _proc, _store):
                    res = run_wrk(wrk, base, args.connections, args.seconds)
                print(json.dumps({"http_run": run + 1, "row": row, "rps": round(res["rps"], 1),
                                  "non_2xx": res["non_2xx"]}), file=sys.stderr, flush=True)
                results[row].append(res)
    except BaseException:
        print(f"http bench stopped; server logs kept in {log_dir}", file=sys.stderr)
        raise
    # The servers' logs matter only when a request failed; otherwise they are removed.
    troubled = any(r["non_2xx"] or r["socket_errors"] for runs in results.values() for r in runs)
    if not troubled:
        shutil.rmtree(log_dir, ignore_errors=True)
    medians: dict[str, float] = {}
    for row, runs in results.items():
        label = "ceiling[flask]" if row == "ceiling" else f"headgate[{row}]"
        line = {"bench": "http", "row": label, "what": "POST /api/v1/jobs req/s (2xx)",
                "connections": args.connections, "seconds": args.seconds,
                "threads": args.threads, "processes": args.processes,
                "runs": len(runs), **agg([r["rps"] for r in runs]),
                "p50_ms": agg([r["p50_us"] / 1000 for r in runs], 2),
                "p99_ms": agg([r["p99_us"] / 1000 for r in runs], 2),
                "non_2xx": [r["non_2xx"] for r in runs],
                "socket_errors": [r["socket_errors"] for r in runs]}
        medians[row] = line["median"]
        print(json.dumps(line), flush=True)
    ceiling = medians.get("ceiling") or 0
    ratios = {f"headgate[{r}] / ceiling": round(medians[r] / ceiling, 2)
              for r in rows if r != "ceiling" and ceiling}
    print(json.dumps({"bench": "http", "ratios": ratios, "target": 0.7,
                      "logs": str(log_dir) if troubled else None}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
