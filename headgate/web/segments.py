"""Names and ids in a route's path, which may hold `/` (a queue, class, limit or schedule
name and a job id may hold any character but NUL).

A name in a route is one path segment, decoded after routing, so `/queues/a%2Fb/pause`
addresses queue `a/b`. A WSGI server decodes the whole path before Flask routes it, and
`a%2Fb` would arrive as two segments. So for a request whose raw path holds `%2F`, the
path is decoded again with each such slash as NUL (which no name may hold, and which
the NUL guard lets through on such a request only), and the `segment` converter turns it
back: one segment, as the route declares it; a path with more segments routes (or fails to) as
before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlsplit

from werkzeug.routing import BaseConverter

from .wsgi import WsgiApp

ENCODED_SLASH = re.compile(r"%2f", re.IGNORECASE)
SLASH_MARK = "\x00"
# Set in the environ of a request whose path was rebuilt: its NULs are slash marks.
MARKED = "headgate.slash_marks"


class Segment(BaseConverter):
    """One path segment; an encoded slash inside it comes back as `/`."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return value.replace(SLASH_MARK, "/")

    def to_url(self, value: str) -> str:
        return quote(value, safe="")


def keep_encoded_slashes(wsgi_app: WsgiApp) -> WsgiApp:
    """Wrap the app so `%2F` in the raw path stays inside its segment."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = (environ.get("RAW_URI") or environ.get("REQUEST_URI") or "").split("?", 1)[0]
        if "://" in path:  # absolute-form request target
            path = urlsplit(path).path
        # The API's paths only (the console's routes take whole paths), at the root, and
        # never when the path holds an encoded NUL: that must still be refused as one.
        if (path.startswith("/api/") and ENCODED_SLASH.search(path) and "%00" not in path
                and not environ.get("SCRIPT_NAME")):
            marked = ENCODED_SLASH.sub("%00", path)
            environ["PATH_INFO"] = unquote_to_bytes(marked).decode("latin-1")
            environ[MARKED] = True
        return wsgi_app(environ, start_response)

    return app
