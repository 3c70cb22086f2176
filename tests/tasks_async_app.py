"""An app with an async task and async middleware, for the worker's coroutine runs
(`headgate worker --app tasks_async_app:app`)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import headgate

app = headgate.App()


@app.task(queue="async")
async def slow_double(n: int) -> int:
    await asyncio.sleep(0.01)
    return n * 2


@app.task(queue="async")
def plain_triple(n: int) -> int:
    return n * 3


@app.middleware
async def around(run: Any, call_next: Any) -> Any:
    value = await call_next()
    with (Path(os.environ["HG_TEST_DIR"]) / "async-middleware").open("a") as f:
        f.write(f"{run.kind} {value}\n")
    return value
