"""The task app the integration tests run in real `headgate serve --workers`
and `headgate worker` processes, and produce to from the test process.

The App's URL comes from HG_INTEGRATION_URL: unset in the server and worker processes
(their store is --store / HG_*), an http:// server URL in a producer that has no
database access. The same Task objects serve both."""

from __future__ import annotations

import logging
import os

import headgate

app = headgate.App(os.environ.get("HG_INTEGRATION_URL") or None,
                   token=os.environ.get("HG_INTEGRATION_TOKEN") or None)
log = logging.getLogger("integrations_app")


@app.task(queue="integration")
def add(a: int, b: int) -> int:
    return a + b


@app.task(queue="integration", max_attempts=1, retry=None)
def explode(message: str) -> None:
    raise RuntimeError(message)


@app.task(queue="integration")
def chatty(word: str) -> str:
    log.info("saying %s", word)
    return word.upper()


@app.task(queue="polyglot", rate_class="polyglot")
def polyglot(ms: int) -> dict:
    """The kind examples/http_worker.mjs runs too, next to this worker: it sleeps
    `ms` there and at most 0.2 s here (a job Node hung on ends here)."""
    import time

    time.sleep(min(ms, 200) / 1000)
    return {"ran_by": "python"}
