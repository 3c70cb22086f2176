"""The README's Python example runs as written: its block saved as tasks.py, a real
`headgate worker --app tasks:app` beside it, and the file run as a script (the
producer side) prints the worker's return value."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from support import headgate_cmd

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    section = README.read_text().split("## Python example", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the Python example section has no python block"
    return match.group(1)


def test_the_readme_example_runs_with_a_real_worker(tmp_path: Path) -> None:
    code = readme_example()
    assert "headgate.App(" in code  # the section's first example is the task layer
    (tmp_path / "tasks.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([*headgate_cmd(), "worker", "--app", "tasks:app"], cwd=tmp_path,
                              env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        producer = subprocess.run([sys.executable, "tasks.py"], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=120)
        assert producer.returncode == 0, producer.stderr + (tmp_path / "worker.log").read_text()
        assert producer.stdout.strip() == \
            "{'to': 'a@example.com', 'subject': 'hi', 'status': 'sent'}"
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        assert worker.wait(30) == 0
        log.close()
    # The worker upserted the declared schedule at start.
    assert "reports.digest" in subprocess.run(
        [sys.executable, "-c", "import headgate; s = headgate.open_store('sqlite:///headgate.db');"
         " print([x.id for x in s.list_schedules()])"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60).stdout
