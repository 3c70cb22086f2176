"""The store conformance suite (headgate.testing.conformance) runs from outside the
checkout as an adapter's own tests run it: a test module in a temporary directory
imports the suite and names a fresh database with one fixture, and this venv's pytest
collects the whole suite there and passes it. A SQLite file stands in for the outside
adapter. pytest stays optional: `import headgate` and `import headgate.testing` load
none of it; only the conformance package does."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "headgate" / "testing" / "conformance"

ADAPTER_TESTS = '''\
import pytest

from headgate.testing.conformance import *  # noqa: F403


@pytest.fixture
def headgate_store_url(tmp_path):
    """The adapter under test: a fresh, empty database per test."""
    return f"sqlite:///{tmp_path}/adapter.db"
'''

# A few modules to run in full, and the test whose spawned processes import the suite's
# module by name; the rest is only collected here (tests/store runs it).
SAMPLE = ("TestPortAudit", "TestPortDuties", "TestPortForecast", "TestPortWorkers",
          "eight_processes")


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _collected(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split("::", 1)[1] for line in proc.stdout.splitlines() if "::" in line]


def _one_engine(test_id: str) -> str | None:
    """A tests/store/test_conformance.py id as the outside module names it: its SQLite
    run without the engine's id, None for its PostgreSQL run."""
    name, _, params = test_id.partition("[")
    if not params:
        return name
    tokens = params.rstrip("]").split("-")
    if "pg" in tokens:
        return None
    rest = [t for t in tokens if t != "sqlite"]
    return f"{name}[{'-'.join(rest)}]" if rest else name


def test_an_outside_module_collects_the_whole_suite_and_passes_it(tmp_path: Path) -> None:
    outside = tmp_path / "adapter"
    outside.mkdir()
    assert not outside.resolve().is_relative_to(ROOT)
    module = outside / "test_adapter_conformance.py"
    module.write_text(ADAPTER_TESTS)
    assert len(ADAPTER_TESTS.splitlines()) <= 10  # all an adapter writes

    found = _collected(_pytest(outside, "--co", "-q", module.name))
    ours = _collected(_pytest(ROOT, "--co", "-q", "tests/store/test_conformance.py"))
    expected = [i for i in map(_one_engine, ours) if i is not None]
    assert len(found) == len(expected) > 200
    assert sorted(found) == sorted(expected)

    sample = [i for i in found if any(s in i for s in SAMPLE)]
    assert len(sample) > 20
    proc = _pytest(outside, "-q", "-k", " or ".join(SAMPLE), module.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(rf"\b{len(sample)} passed\b", proc.stdout), proc.stdout
    assert not re.search(r"\b(failed|error|errors|skipped)\b", proc.stdout.splitlines()[-1])


def test_pytest_is_loaded_by_the_conformance_suite_only() -> None:
    probe = ("import sys, headgate, headgate.testing; print('pytest' in sys.modules); "
             "import headgate.testing.conformance; print('pytest' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module or "")
    return found


def test_the_suite_reaches_a_store_through_the_port_only() -> None:
    """An outside adapter has neither the built-in adapters' internals (nor their
    driver) nor this checkout's tests/ helpers: a suite module that needs one tests an
    engine, and belongs in tests/store/."""
    modules = sorted(SUITE.glob("*.py"))
    assert len(modules) > 20
    outside = {f"{p.name}: {name}" for p in modules for name in _imports(p)
               if name.startswith(("headgate.adapters", "psycopg"))
               or name in ("support", "conftest")}
    assert outside == set()
