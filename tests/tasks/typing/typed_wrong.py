"""A deliberately wrong call: mypy must flag the marked line."""

from __future__ import annotations

import headgate

app = headgate.App("sqlite:///typed.db")


@app.task(queue="emails")
def send_email(to: str, subject: str) -> dict[str, str]:
    return {"to": to, "subject": subject}


@app.task
async def fetch(url: str) -> int:
    return len(url)


send_email.enqueue(1)  # WRONG: an int for `to`, and no subject
name: str = fetch.enqueue("u").result()  # WRONG: result() is an int
