"""The client's address behind reverse proxies (HG_TRUSTED_PROXIES).

Behind a proxy every request comes from the proxy's address, so the failed-token
throttle (auth_throttle.py) would count everyone's failures together and lock out
every caller at once. With HG_TRUSTED_PROXIES the client address is read from the
proxies' headers instead; without it those headers are ignored, since any client can
send them.

- A count (`1`, `2`): that many proxies always stand in front of the server; Werkzeug's
  ProxyFix takes the address the outermost one saw (the count-th from the right of
  `X-Forwarded-For`).
- A list of addresses and CIDR ranges (`10.0.0.5,10.1.0.0/16`): only a request whose
  immediate peer is in the list is read; walking `X-Forwarded-For` from the right,
  listed addresses are proxies and the first address that is not is the client.

`Forwarded: for=…` (RFC 7239) is read the same way when no `X-Forwarded-For` is sent.
The peer's own address stays in the environ as `headgate.proxy_peer`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from werkzeug.middleware.proxy_fix import ProxyFix

from .wsgi import WsgiApp

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
PEER_KEY = "headgate.proxy_peer"


def _forwarded_for(value: str) -> list[str]:
    """The `for=` addresses of a Forwarded header, in order (ports and brackets off)."""
    found = []
    for element in value.split(","):
        for pair in element.split(";"):
            name, _, raw = pair.strip().partition("=")
            if name.strip().lower() != "for":
                continue
            addr = raw.strip().strip('"')
            if addr.startswith("["):
                addr = addr[1:addr.find("]")] if "]" in addr else addr[1:]
            elif addr.count(":") == 1:
                addr = addr.split(":", 1)[0]
            found.append(addr)
    return found


def _hops(environ: dict[str, Any]) -> list[str]:
    xff = environ.get("HTTP_X_FORWARDED_FOR")
    if xff:
        return [a.strip() for a in xff.split(",") if a.strip()]
    forwarded = environ.get("HTTP_FORWARDED")
    return _forwarded_for(forwarded) if forwarded else []


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _listed(text: str | None, networks: Sequence[Network]) -> bool:
    addr = _address(text or "")
    return addr is not None and any(addr in net for net in networks)


def trust_proxies(app: WsgiApp, trusted: int | Sequence[Network]) -> WsgiApp:
    """Wrap `app` so REMOTE_ADDR is the client's address as `trusted` defines it."""
    if isinstance(trusted, int):
        fixed = ProxyFix(app, x_for=trusted)  # type: ignore[arg-type]

        def by_count(environ: dict[str, Any], start_response: Callable[..., Any]
                     ) -> Iterable[bytes]:
            environ[PEER_KEY] = environ.get("REMOTE_ADDR")
            if "HTTP_X_FORWARDED_FOR" not in environ and "HTTP_FORWARDED" in environ:
                hops = _hops(environ)
                if hops:
                    environ["HTTP_X_FORWARDED_FOR"] = ", ".join(hops)
            return fixed(environ, start_response)

        return by_count

    networks = tuple(trusted)

    def by_list(environ: dict[str, Any], start_response: Callable[..., Any]
                ) -> Iterable[bytes]:
        peer = environ.get("REMOTE_ADDR")
        environ[PEER_KEY] = peer
        if _listed(peer, networks):
            hops = _hops(environ)
            client = None
            for hop in reversed(hops):
                client = hop
                if not _listed(hop, networks):
                    break
            if client is not None and _address(client) is not None:
                environ["REMOTE_ADDR"] = client
        return app(environ, start_response)

    return by_list
