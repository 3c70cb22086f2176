"""The content fingerprint, which keys quarantine (docs/ARCHITECTURE.md, Jobs)."""

from __future__ import annotations

import hashlib
import struct

# The length-prefixed kind, per kind (a process enqueues few kinds; bounded anyway).
_PREFIXES: dict[str, bytes] = {}
_MAX_PREFIXES = 4096


def fingerprint(kind: str, payload: bytes) -> str:
    prefix = _PREFIXES.get(kind)
    if prefix is None:
        kind_bytes = kind.encode()
        prefix = struct.pack("<I", len(kind_bytes)) + kind_bytes
        if len(_PREFIXES) < _MAX_PREFIXES:
            _PREFIXES[kind] = prefix
    return hashlib.sha256(prefix + struct.pack("<I", len(payload)) + payload).digest()[:16].hex()
