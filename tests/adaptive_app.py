"""The task app of the adaptive rate class test (tests/worker/test_adaptive_downstream.py),
run by `headgate worker --app adaptive_app:app` child processes. No tests here.

`call_downstream` calls the test's local HTTP server (its URL in $HG_TEST_DOWNSTREAM)
and raises headgate.Throttled when the server answers 429, with its Retry-After."""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import headgate

app = headgate.App()


@app.task(rate_class="downstream", max_attempts=3)
def call_downstream(n: int) -> int:
    try:
        with urllib.request.urlopen(f"{os.environ['HG_TEST_DOWNSTREAM']}/call/{n}",
                                    timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        if exc.code == 429:
            raise headgate.Throttled(
                retry_after_ms=int(exc.headers.get("Retry-After", "1")) * 1000) from None
        raise
