"""The Django integration driven through examples/django_site: real
Django (5.2 + the django-tasks backport on Python 3.11, django.tasks on Django 6), a
real SQLite database for Django, a real `manage.py headgate_worker` process, on both
headgate backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import headgate_cmd

import headgate

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "examples" / "django_site"

PRELUDE = """
import json, os, sys, time
import django
django.setup()
from django.db import transaction
from orders.models import Order
from orders import tasks
try:
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:
    from django_tasks import TaskResultStatus, task_backends
    from django_tasks.exceptions import TaskResultDoesNotExist

def settle(result, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        result.refresh()
        if result.is_finished or time.monotonic() > deadline:
            return result
        time.sleep(0.05)

def out(**values):
    print(json.dumps(values, default=str))
"""


def site_env(tmp_path: Path, store_url: str, extra_path: Sequence[str] = ()
             ) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env.update({"DJANGO_SETTINGS_MODULE": "django_site.settings",
                "EXAMPLE_DB": str(tmp_path / "django.sqlite3"),
                "HG_EXAMPLE_STORE": store_url,
                "PYTHONPATH": os.pathsep.join([str(SITE), *extra_path])})
    return env


def run_site(env: dict[str, str], code: str, python: str = sys.executable) -> dict[str, Any]:
    """Run ``code`` in a fresh Django process of the example site; the JSON it printed."""
    proc = subprocess.run([python, "-c", PRELUDE + textwrap.dedent(code)], cwd=SITE,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@contextmanager
def running_site(env: dict[str, str], log: Path, python: str = sys.executable
                 ) -> Iterator[dict[str, str]]:
    """The site migrated and a `manage.py headgate_worker` running beside it."""
    subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=SITE, env=env, check=True,
                   timeout=120)
    err = log.open("wb")
    worker = subprocess.Popen(
        [python, "manage.py", "headgate_worker", "--queues", "default,orders",
         "--concurrency", "2", "--worker-id", "django-worker", "--drain-ms", "2000"],
        cwd=SITE, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        yield env
    finally:
        worker.terminate()
        try:
            code = worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            raise
        err.close()
        assert code == 0, log.read_text()


@pytest.fixture
def site(store_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    with running_site(site_env(tmp_path, store_url), tmp_path / "worker.err") as env:
        yield env


def test_a_task_runs_in_the_worker_and_its_result_comes_back(
        site: dict[str, str], store_url: str) -> None:
    got = run_site(site, """
        first = tasks.add.enqueue(2, 3)
        ready = first.status
        done = settle(first)
        again = tasks.add.get_result(first.id)
        later = settle(tasks.add_later.enqueue(20, 22))
        ctx = settle(tasks.which_attempt.enqueue())
        import asyncio
        async def produce():
            result = await tasks.add.aenqueue(4, 4)
            while not result.is_finished:
                await asyncio.sleep(0.05)
                await result.arefresh()
            return result.return_value
        via_async = asyncio.run(produce())
        out(via_async=via_async, id=first.id, ready=ready, status=done.status,
            value=done.return_value,
            again=again.return_value, attempts=again.attempts, worker=again.worker_ids,
            later=later.return_value, context_attempt=ctx.return_value,
            enqueued=str(done.enqueued_at), finished=str(done.finished_at))
    """)
    assert got["ready"] == "READY"
    assert got["status"] == "SUCCESSFUL"
    assert got["value"] == got["again"] == 5
    assert got["attempts"] == 1 and got["worker"] == ["django-worker"]
    assert got["later"] == 42  # an async def task
    assert got["context_attempt"] == 1
    assert got["via_async"] == 8  # aenqueue / arefresh
    assert got["finished"] >= got["enqueued"]
    store = headgate.open_store(store_url)
    try:
        job = store.get_job(got["id"])
        assert (job.kind, job.queue, job.state) == ("orders.tasks.add", "default",
                                                    headgate.State.COMPLETED)
    finally:
        store.close()


def test_queue_priority_and_enqueue_on_commit(site: dict[str, str], store_url: str) -> None:
    got = run_site(site, """
        with transaction.atomic():
            order = Order.objects.create(customer="ada")
            shipped = tasks.ship.enqueue(order.pk)
            try:
                tasks.ship.get_result(shipped.id)
                visible_before_commit = True
            except TaskResultDoesNotExist:
                visible_before_commit = False
        done = settle(shipped)
        try:
            with transaction.atomic():
                rolled = tasks.add.enqueue(1, 1)
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        try:
            tasks.add.get_result(rolled.id)
            rolled_back_exists = True
        except TaskResultDoesNotExist:
            rolled_back_exists = False
        urgent = tasks.add.using(priority=-100, queue_name="orders").enqueue(1, 2)
        out(shipped=shipped.id, before=visible_before_commit, status=done.status,
            value=done.return_value, row=Order.objects.get(pk=order.pk).shipped,
            rolled_back_exists=rolled_back_exists, urgent=urgent.id)
    """)
    assert got["before"] is False
    assert got["status"] == "SUCCESSFUL"
    assert got["value"]["customer"] == "ada" and got["row"] is True
    assert got["rolled_back_exists"] is False
    store = headgate.open_store(store_url)
    try:
        shipped = store.get_job(got["shipped"])
        urgent = store.get_job(got["urgent"])
        assert (shipped.queue, shipped.priority) == ("orders", 10)
        assert (urgent.queue, urgent.priority) == ("orders", -100)
        assert len(store.list_jobs(headgate.JobFilter(kind="orders.tasks.add")).jobs) == 1
    finally:
        store.close()


def test_failures_and_bad_arguments(site: dict[str, str], store_url: str) -> None:
    got = run_site(site, """
        failed = settle(tasks.refuse.enqueue("out of stock"))
        error = failed.errors[0]
        try:
            tasks.add.enqueue(object(), 1)
            bad = None
        except TypeError as exc:
            bad = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
        try:
            tasks.add.get_result("no-such-job")
            missing = False
        except TaskResultDoesNotExist:
            missing = True
        try:
            failed.return_value
            raised = False
        except ValueError:
            raised = True
        out(status=failed.status, path=error.exception_class_path,
            cls=error.exception_class.__name__, trace=error.traceback, bad=bad,
            missing=missing, raised=raised)
    """)
    assert got["status"] == "FAILED" and got["raised"] is True
    assert got["path"] == "builtins.ValueError" and got["cls"] == "ValueError"
    assert "out of stock" in got["trace"] and "Traceback" in got["trace"]
    # Django's own error for an argument JSON cannot hold, and nothing was stored.
    assert got["bad"] is not None and got["bad"].startswith("builtins.TypeError")
    assert got["missing"] is True
    store = headgate.open_store(store_url)
    try:
        assert store.list_jobs(headgate.JobFilter(kind="orders.tasks.add")).jobs == []
    finally:
        store.close()


def test_headgate_worker_django_runs_the_projects_tasks(store_url: str,
                                                        tmp_path: Path) -> None:
    """`headgate worker --django` runs the worker `manage.py headgate_worker`
    runs, Django set up from DJANGO_SETTINGS_MODULE with the project folder (the working
    directory) importable, not from PYTHONPATH."""
    env = site_env(tmp_path, store_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=SITE, env=env,
                   check=True, timeout=120)
    worker_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    log = tmp_path / "cli-worker.err"
    with log.open("wb") as err:
        worker = subprocess.Popen(
            [*headgate_cmd(), "worker", "--django", "--queues", "default,orders",
             "--concurrency", "2", "--worker-id", "cli-django", "--drain-ms", "2000"],
            cwd=SITE, env=worker_env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        got = run_site(env, """
            done = settle(tasks.add.enqueue(2, 3), timeout=60)
            order = Order.objects.create(customer="ada")
            shipped = settle(tasks.ship.enqueue(order.pk))
            failed = settle(tasks.refuse.enqueue("no"))
            out(status=done.status, value=done.return_value, worker=done.worker_ids,
                shipped=shipped.return_value, failed=failed.status,
                error=failed.errors[0].exception_class_path)
        """)
    except AssertionError as exc:  # say what the worker said (a start that failed)
        raise AssertionError(f"{exc}\nworker's log:\n{log.read_text()}") from None
    finally:
        worker.terminate()
        try:
            code = worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            raise
    assert code == 0, log.read_text()
    assert got["status"] == "SUCCESSFUL" and got["value"] == 5, log.read_text()
    assert got["worker"] == ["cli-django"]
    assert got["shipped"]["customer"] == "ada"  # the "orders" queue, a model's row
    assert (got["failed"], got["error"]) == ("FAILED", "builtins.ValueError")


@pytest.mark.parametrize("settings_module, message", [
    (None, "DJANGO_SETTINGS_MODULE is not set"),
    ("no_such_site.settings", "cannot set up Django with no_such_site.settings"),
])
def test_headgate_worker_django_without_a_usable_project_is_one_error_line(
        tmp_path: Path, settings_module: str | None, message: str) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HG_") and k != "DJANGO_SETTINGS_MODULE"}
    if settings_module:
        env["DJANGO_SETTINGS_MODULE"] = settings_module
    result = subprocess.run([*headgate_cmd(), "worker", "--django"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"headgate: error: {message}"), line


def test_headgate_worker_django_names_its_store_and_refuses_another(
        store_url: str, tmp_path: Path) -> None:
    """The backend's URL is the worker's store: a `--store` naming another database is
    refused with one line naming both (the worker would drain a database the site never
    writes to); the backend's own URL, given again, is its first log line."""
    env = {k: v for k, v in site_env(tmp_path, store_url).items() if k != "PYTHONPATH"}
    other = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    refused = subprocess.run([*headgate_cmd(), "worker", "--django", "--store", other],
                             cwd=SITE, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.splitlines()
    assert line.startswith("headgate: error: the command's store"), line
    assert "elsewhere.db" in line and "App(" in line
    log = tmp_path / "named.err"
    with log.open("wb") as err:
        worker = subprocess.Popen(
            [*headgate_cmd(), "worker", "--django", "--store", store_url,
             "--drain-ms", "500"], cwd=SITE, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while "worker store:" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        worker.terminate()
        worker.wait(30)
    first = log.read_text().splitlines()[0]
    assert "worker store:" in first and "(from --store)" in first, first
