"""A type checker knows the task layer's types: mypy (pinned in the test extra) accepts
tests/tasks/typing/typed_example.py under --strict and flags each wrong call of
tests/tasks/typing/typed_wrong.py (a task enqueued with arguments of the wrong type, a
result used as the wrong type)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TYPING_DIR = Path(__file__).resolve().parent / "typing"
ROOT = TYPING_DIR.parents[2]  # the checkout: mypy finds the headgate package there


def mypy(path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy")
    # Only the named file's errors: the rest of the package is not under test here.
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-incremental",
         "--cache-dir", "/dev/null", "--no-error-summary", "--show-column-numbers",
         *flags, str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_typed_example_passes_strict_mypy() -> None:
    proc = mypy(TYPING_DIR / "typed_example.py", "--strict")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_each_wrong_call_is_flagged() -> None:
    path = TYPING_DIR / "typed_wrong.py"
    proc = mypy(path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    wrong = [n for n, line in enumerate(path.read_text().splitlines(), 1) if "# WRONG" in line]
    flagged = {int(line.split(":")[1]) for line in proc.stdout.splitlines()
               if line.startswith(str(path.relative_to(ROOT))) and ": error:" in line}
    assert len(wrong) == 2 and flagged == set(wrong), proc.stdout
    assert 'incompatible type "int"; expected "str"' in proc.stdout
