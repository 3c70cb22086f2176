"""Payload decoders: ``decoder(payload: bytes, schema_version: int) -> value``.

A decoder turns the stored bytes into what the handler works with, and is the one place
where old payload versions are upcast, so handlers only ever see the current shape.
Jobs enqueued months ago by an old producer keep working after the handler moved on.

Any exception from a decoder (or an explicit ``Undecodable``) makes the job
``undecodable``: a payload that cannot be read now will not be readable on a retry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .outcomes import Undecodable

Decoder = Callable[[bytes, int], Any]
Upcaster = Callable[[Any], Any]


class JsonDecoder:
    """JSON payloads with a version chain.

    ``JsonDecoder(current=3, upcasters={1: v1_to_v2, 2: v2_to_v3})`` reads a version-1
    payload, applies ``v1_to_v2`` then ``v2_to_v3``, and hands the handler a version-3
    value. A payload newer than ``current`` is undecodable for this worker: it was
    written by newer code, and guessing would be worse than parking it visibly.
    """

    def __init__(self, current: int = 1, upcasters: Mapping[int, Upcaster] | None = None) -> None:
        if isinstance(current, bool) or not isinstance(current, int) or current < 1:
            raise ValueError("current schema version must be an integer >= 1")
        self.current = current
        self.upcasters = dict(upcasters or {})
        missing = [v for v in range(1, current) if v not in self.upcasters]
        if self.upcasters and missing:
            raise ValueError(f"no upcaster from schema version(s) {missing}")

    def __call__(self, payload: bytes, schema_version: int) -> Any:
        if schema_version > self.current:
            raise Undecodable(
                f"schema_version {schema_version} is newer than this worker understands "
                f"({self.current})"
            )
        try:
            value = json.loads(payload) if payload else None
        except (ValueError, UnicodeDecodeError) as exc:
            raise Undecodable(f"payload is not valid JSON: {exc}") from exc
        version = schema_version
        while version < self.current:
            step = self.upcasters.get(version)
            if step is None:
                raise Undecodable(f"no upcaster from schema_version {version}")
            value = step(value)
            version += 1
        return value


def raw(payload: bytes, schema_version: int) -> bytes:
    """The identity decoder (the default): the handler gets the bytes."""
    return payload


__all__ = ["Decoder", "JsonDecoder", "raw"]
