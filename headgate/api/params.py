"""Request parsing with the API's normalized rejections (docs/api.md, Conventions).

A bad body or query string is answered with a small, fixed set of messages a client
can branch on, instead of a decoder's prose: 415 `expected Content-Type:
application/json`, 400 `bad json`, 422 `missing field \\`x\\`` / `invalid request body`,
400 `missing query parameter \\`x\\`` / `invalid query parameter \\`x\\``. Each route
declares its fields: a plain field is required, `opt` is optional (absent or null →
None), `dflt` has a default (absent → default, null → invalid). Integer fields carry a
width (i32, u32, i64, u64), so an out-of-range number is a 422 here rather than an
overflow deeper down.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import flask

from .errors import ApiError

INT_RANGES: dict[str, tuple[int, int]] = {
    "i32": (-(2**31), 2**31 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u32": (0, 2**32 - 1),
    "u64": (0, 2**64 - 1),
}
_UNSIGNED = re.compile(r"\+?[0-9]+")
_SIGNED = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # str | bool | i32 | i64 | u32 | u64 | number | str_list | str_map | object
    required: bool = False
    nullable: bool = False
    default: Any = None
    fields: tuple[Field, ...] = field(default=())


def req(name: str, type_: str, fields: Iterable[Field] = ()) -> Field:
    """A required field: must be present and not null."""
    return Field(name, type_, required=True, fields=tuple(fields))


def opt(name: str, type_: str) -> Field:
    """An optional field: absent or null both mean None."""
    return Field(name, type_, nullable=True)


def dflt(name: str, type_: str, default: Any, fields: Iterable[Field] = ()) -> Field:
    """A defaulted field: absent means `default`; null is still a type error."""
    return Field(name, type_, default=default, fields=tuple(fields))


INVALID_BODY = "invalid request body"


class _Object(dict):
    """A JSON object that remembers keys it saw twice (a field given twice is refused)."""

    dupes: frozenset[str] = frozenset()


def _object_pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object()
    seen: set[str] = set()
    dupes = set()
    for key, value in pairs:
        if key in seen:
            dupes.add(key)
        seen.add(key)
        obj[key] = value
    if dupes:
        obj.dupes = frozenset(dupes)
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_text(value: Any) -> None:
    """Lone surrogates decode in Python but are not Unicode: they are a syntax error
    (`bad json`), and they could not be stored anyway."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, dict):
        for key, item in value.items():
            key.encode("utf-8")
            _check_text(item)
    elif isinstance(value, list):
        for item in value:
            _check_text(item)


def is_json_mimetype(mimetype: str) -> bool:
    return mimetype == "application/json" or (
        mimetype.startswith("application/") and mimetype.endswith("+json")
    )


def parse_json_document() -> Any:
    """The raw JSON document of the request, or the 415 / 400 rejection."""
    request = flask.request
    if not is_json_mimetype(request.mimetype):
        # A proxy that strips Content-Type must not be answered with a silent success.
        raise ApiError(415, "expected Content-Type: application/json")
    return parse_json_bytes(request.get_data(cache=True))


def parse_json_bytes(raw: bytes) -> Any:
    """A JSON document from a body's bytes, or the 400 `bad json` rejection."""
    try:
        value = json.loads(raw.decode("utf-8"), object_pairs_hook=_object_pairs,
                           parse_constant=_reject_constant)
        _check_text(value)
    except (UnicodeError, ValueError, RecursionError):
        raise ApiError(400, "bad json") from None
    return value


def json_body(*fields: Field) -> dict[str, Any]:
    """Parse the body into the declared fields (unknown fields are ignored, so
    older servers accept newer clients' bodies)."""
    return read_fields(parse_json_document(), fields)


def read_fields(value: Any, fields: tuple[Field, ...] | Iterable[Field]) -> dict[str, Any]:
    """A parsed document's declared fields, coerced, or the 422 rejection."""
    fields = tuple(fields)
    if not isinstance(value, dict):
        raise ApiError(422, INVALID_BODY)
    dupes: frozenset[str] = getattr(value, "dupes", frozenset())
    out: dict[str, Any] = {}
    # A bad value is reported as it is met, missing fields only at the end.
    for f in fields:
        if f.name in dupes:
            raise ApiError(422, INVALID_BODY)
        if f.name not in value:
            continue
        item = value[f.name]
        if item is None:
            if f.nullable:
                out[f.name] = None
                continue
            raise ApiError(422, INVALID_BODY)
        out[f.name] = _coerce(item, f)
    for f in fields:
        if f.name in value:
            continue
        if f.required:
            raise ApiError(422, f"missing field `{f.name}`")
        default = f.default
        out[f.name] = list(default) if isinstance(default, list) else (
            dict(default) if isinstance(default, dict) else default
        )
    return out


def _coerce(value: Any, f: Field) -> Any:
    kind = f.type
    ok = True
    if kind == "str":
        ok = isinstance(value, str)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind in INT_RANGES:
        low, high = INT_RANGES[kind]
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    elif kind == "str_list":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    elif kind == "str_map":
        ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        if ok:
            value = dict(value)
    elif kind == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind == "object":
        return read_fields(value, f.fields)
    else:  # pragma: no cover - a declaration bug, not input
        raise AssertionError(f"unknown field type {kind}")
    if not ok:
        raise ApiError(422, INVALID_BODY)
    return value


# -- query strings ------------------------------------------------------------------

def query(*fields: Field) -> dict[str, Any]:
    """Parse the query string into the declared fields: a value
    that does not parse is a 400 naming the parameter, never a silent default."""
    args = flask.request.args
    by_name = {f.name: f for f in fields}
    out: dict[str, Any] = {}
    for name, raw in args.items(multi=True):
        f = by_name.get(name)
        if f is None:
            continue  # unknown parameters are ignored, like unknown body fields
        if name in out:
            raise ApiError(400, "invalid query string")
        out[name] = _parse_scalar(raw, f)
    for f in fields:
        if f.name in out:
            continue
        if f.required:
            raise ApiError(400, f"missing query parameter `{f.name}`")
        out[f.name] = f.default
    return out


def _parse_scalar(raw: str, f: Field) -> Any:
    kind = f.type
    if kind == "str":
        return raw
    if kind == "bool":
        if raw in ("true", "false"):
            return raw == "true"
    elif kind in INT_RANGES:
        pattern = _UNSIGNED if kind.startswith("u") else _SIGNED
        if pattern.fullmatch(raw):
            value = int(raw)
            low, high = INT_RANGES[kind]
            if low <= value <= high:
                return value
    raise ApiError(400, f"invalid query parameter `{f.name}`")
