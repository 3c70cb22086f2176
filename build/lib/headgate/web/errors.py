"""The JSON error envelope, `{"error": "...", ...fields}`, as one response.

A leaf below both the API (whose `ApiError` renders through it) and the app-wide
request guards, which answer requests under /api/ in the API's shape before any
handler runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flask


def envelope_response(status: int, body: Mapping[str, Any],
                      headers: Mapping[str, str] | None = None) -> flask.Response:
    resp = flask.jsonify(body)
    resp.status_code = status
    for key, value in (headers or {}).items():
        resp.headers[key] = value
    return resp


def error_response(status: int, message: str, **fields: Any) -> flask.Response:
    return envelope_response(status, {"error": message, **fields})
