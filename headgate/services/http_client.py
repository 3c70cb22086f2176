"""``HttpClient``: a producer that talks to ``headgate serve`` over ``/api/v1`` instead of
opening the store, for processes that have no database credentials.

::

    client = headgate.HttpClient("http://jobs.internal:8080", token="...")
    job_id = client.enqueue("email.send", b'{"to": "a@example.com"}', queue="emails")
    client.get_job(job_id).state

Each ``enqueue`` is one ``POST /api/v1/jobs`` with an ``Idempotency-Key`` made for that
call and sent again on every retry of it, so a retry after a lost answer joins the first
job instead of making a second (the server replays its answer). Retried: 503 (store
unavailable, circuit open), 429 and 409 "still in progress", honouring ``Retry-After``
(capped at ``max_retry_after_s``), and connection failures, with ``attempts`` tries in
all. Answers become the typed errors ``Store`` raises: 401/403 ``Unauthorized`` (403
``EnqueueForbidden`` when the server's authorizer refused the kind), 400/413/415/422
``InvalidInput``, 404 ``NotFound``, 409 ``Duplicate`` or ``IdConflict`` as the body
says, 423 ``Quarantined``, 429 ``Backpressure``; a server still down after the retries
is ``StoreUnavailable``.

The standard library's ``http.client``, one keep-alive connection per thread. The API
has no batch enqueue, so ``enqueue_many`` posts one request per envelope: over HTTP a
batch is not one transaction.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

from headgate.core import (
    Backpressure,
    Blob,
    Duplicate,
    EnqueueForbidden,
    Envelope,
    HeadgateError,
    IdConflict,
    InvalidInput,
    InvalidTransition,
    Job,
    NotFound,
    Quarantined,
    State,
    StoreUnavailable,
    Unauthorized,
)
from headgate.core.states import TERMINAL
from headgate.services.client import EnqueueContext, Middleware, chain

API = "/api/v1"
HTTP_CONTEXT = EnqueueContext(source="http-client")
# Envelope fields POST /jobs takes as they are (unique_key and payload go as base64).
_PLAIN_FIELDS = ("kind", "schema_version", "queue", "priority", "partition_key", "rate_class",
                 "weight", "scheduled_at_ms", "unique_window_ms", "unique_replace",
                 "unique_debounce_ms", "unique_exclude_kind", "pending", "sticky_worker",
                 "max_attempts", "retention_ms", "id")
_RETRIED = (429, 503)
_CONNECTION_ERRORS = (OSError, http.client.HTTPException)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def envelope_body(env: Envelope) -> dict[str, Any]:
    """The ``POST /api/v1/jobs`` body for an envelope."""
    body: dict[str, Any] = {name: getattr(env, name) for name in _PLAIN_FIELDS
                            if getattr(env, name) is not None}
    body["payload"] = _b64(env.payload)
    if env.unique_key is not None:
        body["unique_key"] = _b64(env.unique_key)
    body["tags"] = list(env.tags)
    body["headers"] = dict(env.headers)
    if not body.get("id"):
        body.pop("id", None)
    return body


def job_from_json(body: Mapping[str, Any]) -> Job:
    """A ``Job`` from the API's job body (the lease id is not served: None)."""
    origin = body.get("periodic_origin") or {}
    payload = body.get("payload")
    return Job(
        id=body["id"], kind=body["kind"], queue=body["queue"], state=State(body["state"]),
        schema_version=body["schema_version"], priority=body["priority"],
        partition_key=body["partition_key"], rate_class=body["rate_class"],
        weight=body["weight"], fingerprint=body["fingerprint"],
        scheduled_at_ms=body["scheduled_at_ms"], max_attempts=body["max_attempts"],
        retention_ms=body.get("retention_ms", 0), tags=tuple(body.get("tags", ())),
        sticky_worker=body.get("sticky_worker", ""), headers=dict(body.get("headers", {})),
        attempt=body["attempt"], crash_attempt=body["crash_attempt"],
        fence=body.get("fence", 0), lease_id=None,
        lease_expires_at_ms=body.get("lease_expires_at_ms"),
        worker_id=body.get("worker_id"), enqueued_at_ms=body["enqueued_at_ms"],
        attempted_at_ms=body.get("attempted_at_ms"),
        finalized_at_ms=body.get("finalized_at_ms"), errors=list(body.get("errors", [])),
        periodic_schedule_id=origin.get("schedule_id", ""),
        periodic_tick_ms=origin.get("tick_ms"),
        cancel_requested=bool(body.get("cancel_requested", False)),
        payload=None if payload is None else base64.b64decode(payload),
    )


def error_from_answer(status: int, body: Mapping[str, Any]) -> HeadgateError:
    """The typed error an API error answer stands for."""
    message = str(body.get("error") or f"HTTP {status}")
    if status == 401:
        return Unauthorized(message)
    if status == 403:
        if message == "enqueue forbidden" and "kind" in body:
            return EnqueueForbidden(str(body["kind"]))
        return Unauthorized(message)
    if status == 404:
        return NotFound("resource", message)
    if status == 409:
        if "existing_id" in body:
            return Duplicate(str(body["existing_id"]), bool(body.get("replaced", False)))
        if message.startswith("id conflict: job "):
            return IdConflict(message.removeprefix("id conflict: job "))
        return InvalidTransition(message)
    if status == 423:
        return Quarantined(str(body.get("fingerprint", "")))
    if status == 429 and "queue" in body:
        return Backpressure(str(body["queue"]), int(body.get("limit", 0)),
                            int(body.get("current", 0)), int(body.get("incoming", 0)))
    if status in (429, 503):
        return StoreUnavailable(message)
    if 400 <= status < 500:
        return InvalidInput(message)
    return HeadgateError(f"server error {status}: {message}")


class HttpClient:
    """A producer over the control API. ``url`` is the server's base URL (its
    ``HG_UI_PREFIX`` path included, if any); ``token`` a bearer token from
    ``HG_API_TOKENS``; ``timeout`` seconds per request; ``attempts`` tries per call."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 10.0,
                 attempts: int = 5, max_retry_after_s: float = 30.0,
                 middleware: Iterable[Middleware] = ()) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"HttpClient needs an http:// or https:// URL, got {url!r}")
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise InvalidInput("attempts must be an integer >= 1")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._base = parts.path.rstrip("/") + API
        self._token = token
        self.timeout = timeout
        self.attempts = attempts
        self.max_retry_after_s = max_retry_after_s
        self._local = threading.local()
        # The Client's middleware signature; run around each enqueue_many.
        self.middleware: list[Middleware] = list(middleware)

    def __repr__(self) -> str:
        return f"<HttpClient {self.url}>"

    # -- transport ----------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def close(self) -> None:
        """Close this thread's connection (others close with their threads)."""
        self._drop_connection()

    def request(self, method: str, path: str, body: Any = None, *,
                missing_ok: bool = False) -> tuple[int, dict[str, Any]]:
        """One API call (``path`` under /api/v1) with its retries: (status, JSON body) of
        a 2xx answer (or a 404 with ``missing_ok``); any other answer raises its typed
        error. A mutating call carries one Idempotency-Key for all its tries."""
        headers = {"Accept": "application/json", "Connection": "keep-alive"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        if method != "GET":
            headers["Idempotency-Key"] = uuid.uuid4().hex
        last: HeadgateError | None = None
        for attempt in range(self.attempts):
            wait = min(0.1 * 2 ** attempt, 2.0)
            try:
                conn = self._connection()
                conn.request(method, self._base + path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self._drop_connection()
            except _CONNECTION_ERRORS as exc:
                # A reused keep-alive connection the server closed, or a server that is
                # down: a fresh connection next time.
                self._drop_connection()
                last = StoreUnavailable(f"server unreachable at {self.url}: "
                                        f"{type(exc).__name__}: {exc}")
            else:
                status = resp.status
                try:
                    answer = json.loads(raw) if raw else {}
                except ValueError:
                    answer = {"error": raw[:200].decode("utf-8", "replace")}
                if not isinstance(answer, dict):
                    answer = {"value": answer}
                if 200 <= status < 300 or (status == 404 and missing_ok):
                    return status, answer
                in_progress = status == 409 and "in progress" in str(answer.get("error"))
                if status not in _RETRIED and not in_progress:
                    raise error_from_answer(status, answer)
                last = error_from_answer(status, answer)
                wait = _retry_after(resp.getheader("Retry-After"), wait,
                                    self.max_retry_after_s)
            if attempt + 1 < self.attempts:
                time.sleep(wait)
        assert last is not None
        raise last

    # -- producing ----------------------------------------------------------------------
    def enqueue(self, kind: str, payload: bytes = b"", *, scheduled_at_ms: int | None = None,
                retention_ms: int | None = None, **fields: Any) -> str:
        env = Envelope(kind=kind, payload=payload, scheduled_at_ms=scheduled_at_ms or 0,
                       retention_ms=retention_ms, **fields)
        return self.enqueue_many([env])[0]

    def enqueue_many(self, envelopes: Sequence[Envelope], *, context: Any = None,
                     conn: Any = None) -> list[str]:
        """One POST per envelope, in order (not one transaction: the API has no batch
        enqueue). All are validated before the first is sent."""
        if conn is not None:
            raise InvalidInput("an enqueue over HTTP cannot join a database transaction "
                               "(conn=); point the App at the database for that")
        envs = [e.validated() for e in envelopes]

        def post(batch: list[Envelope]) -> list[str]:
            ids = []
            for env in batch:
                _, answer = self.request("POST", "/jobs", envelope_body(env.validated()))
                ids.append(str(answer["id"]))
            return ids

        return chain(self.middleware, context or HTTP_CONTEXT, post)(envs)

    async def enqueue_many_async(self, envelopes: Sequence[Envelope], *, conn: Any = None
                                 ) -> list[str]:
        """``enqueue_many`` in a thread (the event loop is not blocked)."""
        return await asyncio.to_thread(self.enqueue_many, envelopes, conn=conn)

    # -- reading ------------------------------------------------------------------------
    def get_job(self, job_id: str, include_payload: bool = False) -> Job | None:
        query = "?include_payload=true" if include_payload else ""
        status, answer = self.request("GET", f"/jobs/{quote(job_id, safe='')}{query}",
                                      missing_ok=True)
        return None if status == 404 else job_from_json(answer)

    def get_result(self, job_id: str) -> Blob | None:
        status, answer = self.request("GET", f"/jobs/{quote(job_id, safe='')}/result",
                                      missing_ok=True)
        if status == 404:
            return None
        return Blob(base64.b64decode(answer["bytes"]), int(answer["schema_version"]))

    def watch_finished(self, job_id: str, callback: Callable[[], None]
                       ) -> Callable[[], None] | None:
        """No announcements over HTTP: result waiters poll (``JobRef``'s backoff)."""
        return None

    def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """Poll until the job is in a terminal state; TimeoutError after ``timeout`` s,
        NotFound when it no longer exists."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.005
        while True:
            job = self.get_job(job_id)
            if job is None:
                raise NotFound("job", job_id)
            if job.state in TERMINAL:
                return job
            if deadline is not None and time.monotonic() + delay > deadline:
                raise TimeoutError(f"job {job_id} has not finished yet")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)


def _retry_after(header: str | None, default: float, cap: float) -> float:
    if header is None:
        return default
    try:
        return max(0.0, min(float(header), cap))
    except ValueError:
        return default


__all__ = ["HttpClient", "envelope_body", "error_from_answer", "job_from_json"]
