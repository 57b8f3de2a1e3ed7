"""The building machine's own HTTP proxy, for the registry proxy to go through.

A machine that reaches the internet only through a proxy names it in ``https_proxy`` /
``http_proxy`` (and ``no_proxy``), the variables ``mmdebstrap`` is given too. The registry
proxy (:mod:`assay.environments.egress`) decides first, then makes each allowed connection
through this one: a ``CONNECT`` for a tunnel, the absolute-URI request for plain HTTP. Only an
``http://`` proxy is supported (as curl and apt name one); credentials in its URL become a
``Proxy-Authorization`` header and appear nowhere else (not in any printed form of these
objects).
"""

from __future__ import annotations

import base64
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import h11

_CHUNK = 65536


@dataclass(frozen=True)
class UpstreamProxy:
    """The building machine's own HTTP proxy (``http://[user:pass@]host:port``)."""

    host: str
    port: int
    authorization: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class HostProxies:
    """The building machine's proxies, by the scheme of what is fetched, and the hosts it
    reaches directly (``no_proxy``)."""

    http: UpstreamProxy | None = None
    https: UpstreamProxy | None = None
    no_proxy: tuple[str, ...] = ()

    def via(self, scheme: str, host: str) -> UpstreamProxy | None:
        """The proxy a connection to ``host`` goes through, or None (direct)."""
        proxy = self.https if scheme == "https" else self.http
        if proxy is None:
            return None
        name = host.lower().rstrip(".")
        for entry in self.no_proxy:
            if entry == "*" or name == entry or name.endswith("." + entry):
                return None
        return proxy


def host_proxies(environ: Mapping[str, str] | None = None) -> HostProxies:
    """The proxies the building machine's environment names (lower-case names first, as curl
    and apt read them). Raises ``ValueError`` for a proxy URL this proxy cannot use."""
    env = os.environ if environ is None else environ

    def read(*names: str) -> UpstreamProxy | None:
        value = next((env[n] for n in names if env.get(n)), "")
        if not value:
            return None
        parts = urlsplit(value if "://" in value else f"http://{value}")
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the building machine's proxy {parts.scheme}://"
                             f"{parts.hostname or '?'} is not an http:// proxy")
        auth = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            auth = b"Basic " + base64.b64encode(pair.encode("utf-8"))
        return UpstreamProxy(parts.hostname, parts.port or 80, auth)

    skip = next((env[n] for n in ("no_proxy", "NO_PROXY") if env.get(n)), "")
    entries = tuple(e.strip().lower().lstrip(".") for e in skip.split(",") if e.strip())
    return HostProxies(read("http_proxy", "HTTP_PROXY"),
                       read("https_proxy", "HTTPS_PROXY"), entries)


def proxy_auth(via: UpstreamProxy | None) -> list[tuple[bytes, bytes]]:
    """The header that authenticates to ``via``, if its URL named credentials."""
    if via is None or via.authorization is None:
        return []
    return [(b"proxy-authorization", via.authorization)]


def open_tunnel(sock: socket.socket, target: str, via: UpstreamProxy, *,
                max_head: int) -> bytes | str:
    """``CONNECT target`` through the machine's proxy on ``sock``: the bytes that came after
    its ``200`` (the start of the tunnel), or why it failed."""
    up = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_head)
    sock.sendall(up.send(h11.Request(method="CONNECT", target=target.encode("ascii"),
                                     headers=[(b"host", target.encode("ascii")),
                                              *proxy_auth(via)])) or b"")
    sock.sendall(up.send(h11.EndOfMessage()) or b"")
    where = f"the building machine's proxy {via.host}:{via.port}"
    try:
        while True:
            event = up.next_event()
            if event is h11.NEED_DATA:
                up.receive_data(sock.recv(_CHUNK))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                if 200 <= event.status_code < 300:
                    return up.trailing_data[0]
                return f"{where} answered {event.status_code} to CONNECT {target}"
            return f"{where} closed the connection instead of answering CONNECT {target}"
    except (OSError, h11.RemoteProtocolError) as exc:
        return f"{where} failed on CONNECT {target}: {exc}"
