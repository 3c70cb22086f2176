"""The package type-checks: `mypy headgate` (mypy pinned in the test extra, configured
under [tool.mypy] in pyproject.toml) reports no error. headgate ships py.typed, so an
annotation that drifts from its code would mislead every application's type checker;
here it fails the suite instead."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the checkout: pyproject.toml and headgate/


def test_mypy_finds_no_error_in_the_package() -> None:
    pytest.importorskip("mypy")
    # No cache: nothing written into the checkout, no stale result read from it.
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", "/dev/null",
         "headgate"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
