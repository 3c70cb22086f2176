"""The same example site on Django 6's own `django.tasks`: Django 6
needs Python 3.12, so this builds a Python 3.12 virtualenv with Django 6 and headgate's
runtime dependencies, puts this checkout on its path, and runs the example's scenario
there (SQLite for both Django and headgate). Skipped when no Python 3.12 is found."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_django_example import ROOT, run_site, running_site, site_env

pytestmark = pytest.mark.slow

RUNTIME = ["django>=6,<7", "flask>=3.1.3,<4", "flask-sock>=0.7.0,<1",
           "sqlite-utils>=4.2.1,<5", "apscheduler>=3.11.3,<4", "gunicorn>=27.0.1,<28",
           "prometheus-client>=0.26.0,<1", "click>=8.5.1,<9", "tzdata>=2026.6"]


def python312() -> str | None:
    """A Python 3.12 that runs (a pyenv shim may name one that is not selected)."""
    candidates = [*sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python")),
                          reverse=True), shutil.which("python3.12")]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30)
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 12)":
            return candidate
    return None


@pytest.fixture(scope="module")
def django6_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    interpreter = python312()
    if interpreter is None:
        pytest.skip("no Python 3.12 interpreter (python3.12 or ~/.pyenv/versions/3.12*): "
                    "Django 6 needs one")
    venv = tmp_path_factory.mktemp("django6") / "venv"
    subprocess.run([interpreter, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *RUNTIME],
                         capture_output=True, text=True, timeout=600)
    if pip.returncode != 0:
        pytest.skip(f"cannot install Django 6 into a Python 3.12 venv: {pip.stderr[-500:]}")
    return str(venv / "bin" / "python")


def test_the_example_site_on_django_6(django6_python: str, tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    env = site_env(tmp_path, store_url, extra_path=[str(ROOT)])
    with running_site(env, tmp_path / "worker.err", python=django6_python):
        got = run_site(env, """
            import django.tasks
            done = settle(tasks.add.enqueue(2, 3))
            with transaction.atomic():
                order = Order.objects.create(customer="grace")
                shipped = tasks.ship.enqueue(order.pk)
            shipped = settle(shipped)
            failed = settle(tasks.refuse.enqueue("no"))
            try:
                tasks.add.enqueue(object())
                bad = None
            except TypeError as exc:
                bad = str(exc)
            out(framework=type(done).__module__, django=django.get_version(),
                status=done.status, value=done.return_value, shipped=shipped.return_value,
                failed=failed.status, path=failed.errors[0].exception_class_path, bad=bad)
        """, python=django6_python)
    assert got["framework"] == "django.tasks.base" and got["django"].startswith("6.")
    assert (got["status"], got["value"]) == ("SUCCESSFUL", 5)
    assert got["shipped"]["customer"] == "grace"
    assert (got["failed"], got["path"]) == ("FAILED", "builtins.ValueError")
    assert got["bad"] is not None
