"""A convention of this suite: tests take shared helpers from modules such as
tests/support.py, never from a conftest.py. Every folder's conftest.py is imported as a
module named `conftest`, so `from conftest import …` reaches whichever was imported
last: a folder's own conftest.py once left thirteen test modules unable to import."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORTS_CONFTEST = re.compile(r"\s*(from\s+conftest\s+import|import\s+conftest\b)")


def test_no_test_module_imports_a_conftest() -> None:
    hits = [f"{path.relative_to(ROOT)}:{number}"
            for folder in ("tests", "e2e") for path in sorted((ROOT / folder).rglob("*.py"))
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if IMPORTS_CONFTEST.match(line)]
    assert hits == [], hits
