"""A task declared in a script run as `python tasks.py` has the kind `__main__.…`,
which a worker (importing the module as `tasks`) never has: its jobs would end
undecodable. Enqueueing one raises `headgate.UnimportableTask`, which says how to fix it,
everywhere (`app.testing()` and a schedule too); the fix it names works with a real
worker process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from integration_support import worker

import headgate
from headgate.tasks import UnimportableTask

TASKS = '''
import asyncio
import json
import sys

import headgate

app = headgate.App()


@app.task
def send_email(to: str) -> str:
    return f"sent to {to}"


@app.task(name="emails.named")
def named(to: str) -> str:
    return f"named {to}"


def refused(call) -> dict:
    try:
        call()
    except headgate.UnimportableTask as exc:
        return {"type": type(exc).__name__, "message": str(exc),
                "headgate_error": isinstance(exc, headgate.HeadgateError),
                "kind": exc.kind}
    return {"type": None}


if __name__ == "__main__":
    out = {"kind": send_email.name}
    out["enqueue"] = refused(lambda: send_email.enqueue("a@example.com"))
    out["enqueue_many"] = refused(lambda: app.enqueue_many([send_email.call("b")]))
    out["options"] = refused(lambda: send_email.options(priority=3).enqueue("c"))
    out["async"] = refused(lambda: asyncio.run(send_email.enqueue_async("d")))
    with app.testing() as t:
        out["testing"] = refused(lambda: send_email.enqueue("e"))
        out["testing_jobs"] = len(t.jobs())
    out["named"] = named.enqueue("f").id
    # The fix the error names: the task imported from its module.
    from tasks import send_email as imported
    out["imported_kind"] = imported.name
    out["imported"] = imported.enqueue("g").id
    out["stored"] = sorted(j.kind for j in app.store.list_jobs(headgate.JobFilter()).jobs)
    print(json.dumps(out))
'''

PERIODIC = '''
import headgate

app = headgate.App()


@app.periodic("@every:60000")
def tick() -> None: ...


if __name__ == "__main__":
    app.worker()
'''


def run_script(tmp_path: Path, name: str, text: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["HG_SQLITE"] = str(tmp_path / "jobs.db")
    return subprocess.run([sys.executable, name], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_enqueueing_a_task_of_a_script_run_directly_is_refused_with_the_fix(
        tmp_path: Path) -> None:
    proc = run_script(tmp_path, "tasks.py", TASKS)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["kind"] == "__main__.send_email"
    for case in ("enqueue", "enqueue_many", "options", "async", "testing"):
        refusal = out[case]
        assert refusal["type"] == "UnimportableTask", (case, refusal)
        assert refusal["headgate_error"] and refusal["kind"] == "__main__.send_email"
        message = refusal["message"]
        assert "python tasks.py" in message
        assert "from tasks import send_email" in message
        assert '@app.task(name="send_email")' in message
    assert out["testing_jobs"] == 0
    # A named task and the imported one enqueue; nothing of `__main__` was stored.
    assert out["imported_kind"] == "tasks.send_email"
    assert out["stored"] == ["emails.named", "tasks.send_email"]


def test_the_fix_runs_in_a_real_worker(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "tasks.py", TASKS)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = headgate.open_store(url)
    try:
        with worker(url, tmp_path, app="tasks:app", cwd=tmp_path):
            for job_id, value in ((out["imported"], "sent to g"), (out["named"], "named f")):
                assert headgate.App(store=store).ref(job_id).result(timeout=30) == value
    finally:
        store.close()


def test_a_schedule_of_a_script_run_directly_is_refused_too(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "clock.py", PERIODIC)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("headgate.tasks.errors.UnimportableTask: cannot enqueue task "
                           "'__main__.tick'"), proc.stderr
    assert "from clock import tick" in last


def test_declaring_is_fine_and_named_tasks_of_main_are_not_refused() -> None:
    app = headgate.App()

    def job() -> None: ...

    job.__module__ = "__main__"
    task = app.task(job)  # declaring never raises
    assert task.name.startswith("__main__.")
    with app.testing(), pytest.raises(UnimportableTask, match="give it a name"):
        task.enqueue()
    named = app.task(name="jobs.main_named")(job)
    with app.testing() as t:
        named.enqueue()
        assert [j.kind for j in t.jobs()] == ["jobs.main_named"]
