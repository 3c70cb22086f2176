"""Request checks that apply to the whole app (API and console) before any handler.

- `reject_nul`: no stored name can hold a NUL character (every write refuses one), so a
  URL carrying one — in the path or the query string — can only be a probe or a broken
  client. PostgreSQL cannot even compare a text column with it (the driver raises before
  the query is sent), so without this check such a read was a 500 there and an empty
  answer on SQLite. It is a 400 on both.
"""

from __future__ import annotations

import flask


def _refuse(message: str) -> flask.Response:
    if flask.request.path.startswith("/api/"):
        from headgate.api.errors import error_response  # deferred: api imports web

        return error_response(400, message)
    return flask.Response(message + "\n", status=400, mimetype="text/plain")


def reject_nul() -> flask.Response | None:
    request = flask.request
    if "\x00" in request.path:
        return _refuse("the URL path must not contain NUL")
    for name, value in request.args.items(multi=True):
        if "\x00" in name:
            return _refuse("invalid query string")
        if "\x00" in value:
            return _refuse(f"invalid query parameter `{name}`")
    return None
