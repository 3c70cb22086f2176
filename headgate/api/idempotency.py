"""Idempotency-Key on every mutating request (docs/api.md, Idempotency-Key).

Presence is required (400 otherwise), and the first successful response is stored in
the database and replayed verbatim — status, body and the headers that carry meaning —
for a retry with the same key within 24 h: a double-clicked Retry or a proxy retrying
a POST must not act twice, even across a restart or onto another serve process.

Decisions:
- Keys are scoped per (caller identity, method, path and query, key): a replay can only
  ever return a response to the same caller's same request, never another caller's.
- Only 2xx responses are stored. A failed request changed nothing, so a retry with the
  same key runs again (a 429 or 503 may well succeed later).
- The same key with a different body is 422; a retry while the first is still running
  is 409 with Retry-After (IETF draft-ietf-httpapi-idempotency-key-header).
- A key whose request failed while the store was unreachable cannot be released then;
  the process remembers it and releases it when the key's retry arrives, instead of
  answering 409 until the row counts as abandoned (60 s).
- Replays carry `Idempotent-Replayed: true`. Enqueue (and periodic run) replays also
  say `"replayed": true` in the body, so a producer knows the job was not new.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time

import flask

from headgate.core.records import IdempotencyRecord

from .context import caller, idempotency_key, store
from .errors import ApiError

log = logging.getLogger("headgate.api")

MUTATING = frozenset({"POST", "PUT", "DELETE"})
MAX_KEY_LENGTH = 255
# Endpoints whose replay answer says so in the body (`replayed: true`).
REPLAY_MARKED = frozenset({"api.enqueue", "api.run_periodic"})
# Response headers worth replaying; Date, Server and lengths are recomputed.
STORED_HEADERS = ("Content-Type", "X-Released-Jobs", "Location", "Retry-After")
_SCOPE = "headgate_idempotency_scope"
_CLAIMED_AT = "headgate_idempotency_claimed_at"
# How long after its claim a key this process could not release is still taken for its
# own (the store calls an in-progress row abandoned after 60 s; after that, someone
# else may have claimed it again).
OWN_CLAIM_S = 50.0
# Keys whose request ended (an error answer) without releasing them, the store being
# unreachable: scope key -> when the claim was made (monotonic).
_unreleased: dict[str, float] = {}
_unreleased_lock = threading.Lock()


def scope_key(key: str) -> str:
    request = flask.request
    return scope_of(caller().identity, request.method, request.path,
                    request.query_string.decode("latin-1"), key)


def scope_of(identity: str, method: str, path: str, query: str, key: str) -> str:
    parts = (identity, method, path, query, key)
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def request_hash() -> str:
    request = flask.request
    return hash_of(request.mimetype, request.get_data(cache=True))


def hash_of(mimetype: str, body: bytes) -> str:
    digest = hashlib.sha256(mimetype.encode("latin-1", "replace") + b"\n")
    digest.update(body)
    return digest.hexdigest()


def require_key() -> str:
    key = idempotency_key()
    if not key:
        raise ApiError(400, "Idempotency-Key header is required on every mutating request")
    if len(key) > MAX_KEY_LENGTH:
        raise ApiError(400, f"Idempotency-Key must be at most {MAX_KEY_LENGTH} characters")
    return key


# Routes that claim their key themselves, in the same transaction as their action where
# they can (one commit per request); the blueprint's hook only checks the header.
OWN_TRANSACTION = frozenset({"api.enqueue"})


def before_mutation() -> flask.Response | None:
    """Claim the key, or answer with the stored response (None: go on and handle it)."""
    require_key()
    if flask.request.endpoint in OWN_TRANSACTION:
        return None
    return claim()


def claim() -> flask.Response | None:
    """The key claimed in its own transaction (completed by after_request), or the
    stored answer to give instead."""
    scope = scope_key(require_key())
    wanted = request_hash()
    claimed_at = time.monotonic()
    record = store().idempotency_begin(scope, wanted)
    if record is not None and released_for_retry(scope, record):
        record = store().idempotency_begin(scope, wanted)
    if record is None:
        setattr(flask.g, _SCOPE, scope)
        setattr(flask.g, _CLAIMED_AT, claimed_at)
        return None
    return answer_existing(record, wanted)


def release(scope: str, claimed_at: float) -> None:
    """Delete the key's in-progress row, so a retry runs again. When the store cannot
    be reached — the outage that failed the request, usually — the key is remembered,
    and the next request with it releases it first (`released_for_retry`) instead of
    being told 409 until the row is abandoned, a minute later."""
    try:
        store().idempotency_abort(scope)
    except Exception:  # noqa: BLE001 - the answer (an error already) must still go out
        log.warning("could not release an Idempotency-Key", exc_info=True)
        now = time.monotonic()
        with _unreleased_lock:
            for old in [k for k, t in _unreleased.items() if now - t > OWN_CLAIM_S]:
                del _unreleased[old]
            _unreleased[scope] = claimed_at


def released_for_retry(scope: str, record: IdempotencyRecord) -> bool:
    """Whether `record` is this process's own claim of the key, left in progress by a
    request that has ended, and is now released (ask for the key again)."""
    if record.state != "in_progress":
        return False
    with _unreleased_lock:
        claimed_at = _unreleased.pop(scope, None)
    if claimed_at is None or time.monotonic() - claimed_at > OWN_CLAIM_S:
        return False
    try:
        store().idempotency_abort(scope)
    except Exception:
        with _unreleased_lock:
            _unreleased.setdefault(scope, claimed_at)
        raise
    return True


def answer_existing(record: IdempotencyRecord, wanted: str) -> flask.Response:
    """A key that has a record: its replay, or why it cannot be replayed."""
    if record.request_hash != wanted:
        raise ApiError(422, "Idempotency-Key was already used with a different request")
    if record.state != "done":
        raise ApiError(409, "a request with this Idempotency-Key is still in progress",
                       headers={"Retry-After": "1"})
    return replay(record)


def stored_parts(response: flask.Response) -> tuple[int, dict[str, str], bytes]:
    """What a replay of `response` needs: status, the meaningful headers, the body."""
    headers = {k: v for k in STORED_HEADERS if (v := response.headers.get(k))}
    return response.status_code, headers, response.get_data()


def unclaimed_error(error: Exception) -> Exception | flask.Response:
    """For an OWN_TRANSACTION route whose input was refused before its transaction:
    what the key says first (replay, 422 for another body, 409), as if the key had been
    claimed before the input was read; otherwise the input's own error."""
    scope = scope_key(require_key())
    wanted = request_hash()
    claimed_at = time.monotonic()
    record = store().idempotency_begin(scope, wanted)
    if record is not None and released_for_retry(scope, record):
        record = store().idempotency_begin(scope, wanted)
    if record is None:
        release(scope, claimed_at)
        return error
    return answer_existing(record, wanted)


def replay(record: IdempotencyRecord) -> flask.Response:
    assert record.status is not None  # a done record always has its answer's status
    body = record.body
    headers = dict(record.headers)
    status = record.status
    if flask.request.endpoint in REPLAY_MARKED and 200 <= status < 300 and body:
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            doc["replayed"] = True
            body = (flask.json.dumps(doc) + "\n").encode()
    resp = flask.Response(body, status=status)
    # The stored Content-Type only, never Werkzeug's default; and none on an empty body
    # (a key stored before empty answers went bare may still say `text/html`).
    del resp.headers["Content-Type"]
    if not body:
        headers.pop("Content-Type", None)
    for name, value in headers.items():
        resp.headers[name] = value
    resp.headers["Idempotent-Replayed"] = "true"
    return resp


def after_request(response: flask.Response) -> flask.Response:
    scope = flask.g.pop(_SCOPE, None)
    claimed_at = flask.g.pop(_CLAIMED_AT, time.monotonic())
    if scope is None:
        return response
    if not 200 <= response.status_code < 300 or response.is_streamed:
        release(scope, claimed_at)
        return response
    try:
        store().idempotency_complete(scope, *stored_parts(response))
    except Exception:  # noqa: BLE001 - the action happened; the response must still go out
        # Not released: a retry must not run an action that happened again. It is told
        # 409 until the row is abandoned.
        log.warning("could not record the Idempotency-Key outcome", exc_info=True)
    return response


def teardown(_exc: BaseException | None) -> None:
    """A request that died before after_request releases its key for a retry."""
    scope = flask.g.pop(_SCOPE, None)
    claimed_at = flask.g.pop(_CLAIMED_AT, time.monotonic())
    if scope is not None:
        release(scope, claimed_at)
