"""Typed use of the task layer: mypy must accept this file as it is
(tests/tasks/test_tasks_typing.py runs it)."""

from __future__ import annotations

import headgate
from headgate.tasks import JobRef, Task

app = headgate.App("sqlite:///typed.db")


@app.task(queue="emails", retry=headgate.Backoff(base_ms=1_000, max_ms=300_000, jitter=0.25),
          partition=lambda to, **_: to.rsplit("@", 1)[-1], timeout_ms=30_000)
def send_email(to: str, subject: str) -> dict[str, str]:
    return {"to": to, "subject": subject}


@app.task
async def fetch(url: str) -> int:
    return len(url)


def produce() -> str:
    ref: JobRef[dict[str, str]] = send_email.enqueue("a@example.com", subject="hi")
    value: dict[str, str] = ref.result(timeout=10)
    later = send_email.options(priority=5, delay_ms=60_000).enqueue("b@x", "later")
    refs = send_email.enqueue_many([send_email.call("a@x", subject="1")])
    task: Task[[str], int] = fetch
    return value["to"] + later.id + refs[0].id + str(task)


async def produce_async() -> int:
    ref = await fetch.enqueue_async("https://example.com")
    return await ref.result_async(timeout=10) + 1
