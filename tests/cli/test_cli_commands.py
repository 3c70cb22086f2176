"""The `headgate` command's own behaviour, with real processes: a wrong log setting in
the environment is a configuration error like any HG_ variable, `python -m headgate.cli`
knows every command, and `headgate bench` names every benchmark in bench/."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import headgate_cmd

from headgate.cli import BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]
EXIT_CONFIG = 2

# Scripts in bench/ that run as programs but are not `headgate bench` names, and why.
NOT_BENCHMARKS = {
    "compare_table.py": "bench/compare.sh's table of one run's output",
    "cpu_meter.py": "bench/compare.sh's wrapper adding CPU per job to the harness's rows",
    "fixed_rate.py": "the fixed-rate producer thread of held_snapshot.py and long_horizon.py",
    "held_chart.py": "a record of held_snapshot.py's and the peers' runs side by side",
    "held_snapshot_peers.py": "held_snapshot.py's phases for the PostgreSQL peers, run in the "
                              "peer harness's venv (no headgate there)",
    "httpbench.py": "the implementation behind bench/http.py (the `http` name)",
    "inspect.py": "the issue's name for inspection.py (the `inspect` name)",
    "merge_rounds.py": "bench/compare.sh's merge of its rounds' JSON lines",
}


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
        argv: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    return subprocess.run([*(argv or headgate_cmd()), *args], cwd=tmp_path,
                          env={**clean, **(env or {})}, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("variable, value, expected", [
    ("HG_LOG_LEVEL", "LOUD", "HG_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, "
                             "got 'LOUD'"),
    ("HG_LOG_FORMAT", "xml", "HG_LOG_FORMAT must be one of text, json, got 'xml'"),
])
@pytest.mark.parametrize("command", ["serve", "worker", "demo"])
def test_a_bad_log_setting_in_the_environment_is_one_error_line(
        tmp_path: Path, command: str, variable: str, value: str, expected: str) -> None:
    args = {"serve": ["serve", "--store", f"sqlite:///{tmp_path}/s.db"],
            "worker": ["worker", "--app", "worker_app:make_worker"],
            "demo": ["demo", "--db", str(tmp_path / "d.db"), "--no-workers"]}[command]
    result = run(tmp_path, *args, env={variable: value})
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert result.stderr.splitlines() == [f"headgate: error: {expected}"]
    assert list(tmp_path.iterdir()) == []  # refused before any store was opened


def test_a_bad_log_flag_is_a_usage_error_a_bad_variable_a_configuration_error(
        tmp_path: Path) -> None:
    flag = run(tmp_path, "serve", "--log-format", "xml")
    variable = run(tmp_path, "serve", env={"HG_LOG_FORMAT": "xml"})
    assert flag.returncode == variable.returncode == EXIT_CONFIG
    assert "Usage: headgate serve" in flag.stderr and "'xml' is not one of" in flag.stderr
    assert variable.stderr.startswith("headgate: error: HG_LOG_FORMAT") \
        and "Usage:" not in variable.stderr
    # Lower case is accepted from the environment as from the flag: a bad store, not a
    # bad level, is what stops this one.
    good = run(tmp_path, "serve", "--store", f"sqlite:///{tmp_path}/no/dir.db",
               env={"HG_LOG_LEVEL": "debug", "HG_LOG_FORMAT": "JSON"})
    assert good.returncode == 69, good.stderr
    assert good.stderr.startswith("headgate: error: store unavailable")


def test_python_m_headgate_cli_knows_every_command(tmp_path: Path) -> None:
    for command in ("bench", "demo", "migrate", "serve", "worker"):
        result = run(tmp_path, command, "--help", argv=[sys.executable, "-m", "headgate.cli"])
        assert result.returncode == 0, (command, result.stderr)
        assert f"Usage: python -m headgate.cli {command}" in result.stdout


# Benchmarks that import the peers' own common.py (bench/peers_headgate.py).
NEEDS_PEER_HARNESS = {"peers", "memory", "wal"}


def _runs_as_program(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) \
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__":
            return True
    return False


def test_headgate_bench_names_every_benchmark_script_of_the_checkout(
        tmp_path: Path) -> None:
    programs = {p.name for p in (ROOT / "bench").glob("*.py") if _runs_as_program(p)}
    assert programs - set(NOT_BENCHMARKS) == set(BENCHMARKS.values())
    harness = Path(os.environ.get("HG_PEERS_DIR") or ROOT.parent / "shared" / "peers")
    for name in BENCHMARKS:
        # Each name reaches its script, whose own --help answers (argparse's usage); the
        # ones built on the peer harness say where they looked when it is not there.
        result = run(tmp_path, "bench", name, "--help")
        if name in NEEDS_PEER_HARNESS and not (harness / "common.py").exists():
            assert result.returncode != 0, name
            assert "peer harness" in result.stderr, (name, result.stderr)
            assert "Traceback" not in result.stderr, (name, result.stderr)
            continue
        assert result.returncode == 0, (name, result.stderr)
        assert "usage:" in result.stdout.lower(), (name, result.stdout)
