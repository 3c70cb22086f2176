"""The WSGI callable's type, for the middleware that wraps Flask's `wsgi_app`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol


class WsgiApp(Protocol):
    """Its arguments are named, as in Flask's `wsgi_app`, so a wrapper can be assigned
    there (a `Callable[...]` alias is positional-only: mypy refuses it)."""

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]: ...
