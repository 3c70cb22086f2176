"""The content fingerprint of SPEC §3.2, which keys quarantine."""

from __future__ import annotations

import hashlib
import struct


def fingerprint(kind: str, payload: bytes) -> str:
    kind_bytes = kind.encode()
    digest = hashlib.sha256(
        struct.pack("<I", len(kind_bytes)) + kind_bytes + struct.pack("<I", len(payload)) + payload
    ).digest()
    return digest[:16].hex()
