"""What `import headgate` costs a producer, and the conventions of a Python package
(`python -m headgate`, one version), checked in fresh interpreters of this venv. The
same checks on an installed wheel are in test_distribution.py."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

import headgate

# What a producer embedded in a host application must not be made to import.
SERVER_SIDE = ("flask", "gunicorn", "apscheduler")

LOADED = ("import json, sys, headgate; "
          "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60)


def test_import_headgate_loads_neither_flask_gunicorn_nor_apscheduler() -> None:
    proc = _run("-c", LOADED)
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout))
    assert "headgate" in loaded
    assert loaded.isdisjoint(SERVER_SIDE), sorted(loaded & set(SERVER_SIDE))


def test_worker_names_still_resolve_from_the_package() -> None:
    # They load on first use; `from headgate import Worker` and dir() keep working.
    proc = _run("-c", "import headgate, sys; from headgate import Retry, Worker; "
                      "import headgate.worker as w; "
                      "assert Worker is w.Worker and headgate.Retry is w.Retry; "
                      "assert 'Worker' in dir(headgate); print('ok')")
    assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr
    proc = _run("-c", "import headgate; headgate.NoSuchName")
    assert proc.returncode == 1
    assert "AttributeError: module 'headgate' has no attribute 'NoSuchName'" in proc.stderr


def test_every_exported_name_resolves_to_its_defining_module() -> None:
    proc = _run("-c", "import headgate, headgate.tasks as t; "
                      "missing = [n for n in headgate.__all__ "
                      "if getattr(headgate, n, None) is None]; "
                      "assert not missing, missing; "
                      "assert headgate.EncodeError is t.EncodeError; print('ok')")
    assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr


def test_python_m_headgate_is_the_cli_and_reports_the_one_version() -> None:
    proc = _run("-m", "headgate", "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"headgate, version {headgate.__version__}"
    # The installed metadata is built from the same attribute (pyproject: dynamic version).
    assert version("headgate-queue") == headgate.__version__

    proc = _run("-m", "headgate", "migrate", "--store", "sqlite://nope")
    assert proc.returncode == 2
    assert proc.stderr.startswith("headgate: error: ")
