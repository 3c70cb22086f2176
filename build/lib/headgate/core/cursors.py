"""Job page cursors: the last id of a page, base64url, with a short check.

A cursor names a keyset position, so without a check any base64 text would page from
wherever it happened to decode to, and a truncated or made-up cursor would answer a
plausible page instead of an error. Four bytes of a keyed-by-purpose digest make such a
cursor fail to decode (1 in 2^32 passes); they are a typo check, not a secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from .errors import InvalidInput

_CHECK_BYTES = 4
_PURPOSE = b"headgate job cursor\x00"


def _check(raw_id: bytes) -> bytes:
    return hashlib.blake2b(raw_id, digest_size=_CHECK_BYTES, key=_PURPOSE).digest()


def encode_cursor(job_id: str) -> str:
    raw = job_id.encode("utf-8")
    return base64.urlsafe_b64encode(raw + _check(raw)).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The job id a cursor of ours names; InvalidInput for anything we did not issue."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = base64.urlsafe_b64decode(padded.encode("ascii"))
    except (binascii.Error, UnicodeError, ValueError) as exc:
        raise InvalidInput("invalid cursor") from exc
    raw, check = data[:-_CHECK_BYTES], data[-_CHECK_BYTES:]
    if len(data) <= _CHECK_BYTES or _check(raw) != check:
        raise InvalidInput("invalid cursor")
    try:
        job_id = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput("invalid cursor") from exc
    if "\x00" in job_id:  # no id holds one, and PostgreSQL text cannot
        raise InvalidInput("invalid cursor")
    return job_id
