"""How a task's arguments and return value become job payloads and results.

The default is JSON: arguments as ``{"args": [...], "kwargs": {...}}`` with sorted keys
and no spaces, so the same call always gives the same bytes (and so the same
fingerprint, which quarantine keys on); results keep their key order. Any object with
the four methods of ``Codec`` replaces it, per app or per task.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from .errors import EncodeError


class Codec(Protocol):
    def encode_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes: ...

    def decode_args(self, data: bytes) -> tuple[tuple[Any, ...], dict[str, Any]]: ...

    def encode_result(self, value: Any) -> bytes: ...

    def decode_result(self, data: bytes) -> Any: ...


class JsonCodec:
    """Strict JSON: NaN and infinities are refused (other JSON readers reject them), and
    so is anything ``json`` cannot encode, as ``EncodeError`` (a ``TypeError``)."""

    def _dumps(self, value: Any, what: str, sort_keys: bool) -> bytes:
        try:
            return json.dumps(value, separators=(",", ":"), sort_keys=sort_keys,
                              allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise EncodeError(f"{what} cannot be encoded as JSON: {exc}") from exc

    def encode_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        return self._dumps({"args": list(args), "kwargs": kwargs}, "task arguments", True)

    def decode_args(self, data: bytes) -> tuple[tuple[Any, ...], dict[str, Any]]:
        body = json.loads(data) if data else {}
        if not isinstance(body, dict):
            raise ValueError("task payload is not a JSON object")
        args, kwargs = body.get("args", []), body.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError("task payload needs a list 'args' and an object 'kwargs'")
        return tuple(args), kwargs

    def encode_result(self, value: Any) -> bytes:
        # A result keeps its key order: only arguments need one spelling per value.
        return self._dumps(value, "task result", False)

    def decode_result(self, data: bytes) -> Any:
        return json.loads(data)


JSON = JsonCodec()

__all__ = ["JSON", "Codec", "JsonCodec"]
