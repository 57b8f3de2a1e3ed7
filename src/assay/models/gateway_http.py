"""HTTP/1.1 for the gateway, both sides, on asyncio streams.

Why hand-written rather than httpx on the upstream side: the gateway sits on every model call
of every attempt, and its budget is "p50 added under 2 ms, throughput at least 90% of direct"
on a 2-core machine the agents share. Measured here, one keep-alive request to an instant local
server costs about 1.2 ms through ``httpx.AsyncClient`` and about 0.13 ms on a bare asyncio
connection; httpx alone would spend most of the budget. What a model API needs is small: one
request at a time per connection, ``Content-Length``/chunked/close-delimited bodies read as
they arrive, keep-alive reuse, TLS with SNI from the standard library. Proxies are not
supported: the gateway connects to the upstream directly.

Errors are ``TransportError``: ``fatal=True`` when no connection could be made at all (the
runner classifies that as ``infra_error``), ``fatal=False`` when a connection was made and the
answer broke off.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

from assay.errors import TransportError

MAX_HEAD = 64 * 1024
#: Idle upstream connections older than this are not reused: servers drop idle ones (uvicorn,
#: under most local model servers, after 5 s), and a request written into a connection the
#: server is closing fails without an answer. Reconnecting costs far less than a model call.
IDLE_SECONDS = 4.0

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "content-length", "host", "expect",
})


class BadRequest(Exception):  # noqa: N818 - internal signal, never leaves the gateway
    """The agent sent something this parser does not take; answered with a 400."""


@dataclass
class Request:
    """One request from an agent."""

    method: str
    target: str
    # Header names lower-cased; a repeated header keeps its last value.
    headers: dict[str, str]
    body: bytes
    keep_alive: bool

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0].rstrip("/") or "/"

    @property
    def query(self) -> str:
        _, sep, query = self.target.partition("?")
        return sep + query


async def read_request(reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> Request | None:
    """The next request on a connection; None at a clean end between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadRequest("connection closed mid-headers") from exc
    except asyncio.LimitOverrunError as exc:
        raise BadRequest("request head too large") from exc
    lines = head[:-4].decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError as exc:
        raise BadRequest(f"malformed request line {lines[0][:100]!r}") from exc
    if not version.startswith("HTTP/1."):
        raise BadRequest(f"unsupported protocol {version[:20]!r}")
    headers = _parse_headers(lines[1:])
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits for it before a body
    try:
        body = await _read_body(reader, headers, request=True)
    except asyncio.IncompleteReadError as exc:
        raise BadRequest("connection closed mid-body") from exc
    except ValueError as exc:
        raise BadRequest(f"bad body framing: {exc}") from exc
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep = "keep-alive" in tokens if version == "HTTP/1.0" else "close" not in tokens
    return Request(method, target, headers, body, keep)


def _parse_headers(lines: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(f"malformed header line {line[:100]!r}")
        headers[name.strip().lower()] = value.strip()
    return headers


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str], *,
                     request: bool) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return b"".join([chunk async for chunk in _chunks(reader)])
    length = headers.get("content-length")
    if length is not None:
        n = int(length)
        if n < 0:
            raise ValueError("negative Content-Length")
        return await reader.readexactly(n) if n else b""
    return b"" if request else await reader.read()


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers
            return
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        yield data


def response_head(status: int, headers: list[tuple[str, str]], *, length: int | None,
                  close: bool) -> bytes:
    """Status line and headers; ``length`` None means a chunked body follows."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Status"
    out = [f"HTTP/1.1 {status} {reason}"]
    out += [f"{k}: {v}" for k, v in headers if k.lower() not in HOP_BY_HOP]
    out.append(f"Content-Length: {length}" if length is not None
               else "Transfer-Encoding: chunked")
    out.append("Connection: close" if close else "Connection: keep-alive")
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


LAST_CHUNK = b"0\r\n\r\n"


# ------------------------------------------------------------------------------- upstream


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def usable(self) -> bool:
        return (not self.reader.at_eof() and not self.writer.is_closing()
                and time.monotonic() - self.idle_since < IDLE_SECONDS)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


@dataclass
class UpstreamResponse:
    """An answer whose body is read as it arrives; ``aclose`` returns the connection."""

    status: int
    headers: list[tuple[str, str]]
    _conn: _Conn
    _pool: UpstreamPool
    _framing: str  # "length", "chunked" or "close"
    _length: int = 0
    _reusable: bool = True
    _finished: bool = field(default=False)

    def header(self, name: str) -> str:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return ""

    async def iter_body(self) -> AsyncIterator[bytes]:
        """The body as it arrives; each wait for the next piece has the read timeout."""
        reader, timeout = self._conn.reader, self._pool.read_timeout
        try:
            if self._framing == "chunked":
                pieces = _chunks(reader)
                while True:
                    try:
                        async with asyncio.timeout(timeout):
                            data = await anext(pieces)
                    except StopAsyncIteration:
                        break
                    yield data
            else:
                left = self._length if self._framing == "length" else -1
                while left:
                    async with asyncio.timeout(timeout):
                        data = await reader.read(min(left, 1 << 16) if left > 0 else 1 << 16)
                    if not data:
                        if left > 0:
                            raise asyncio.IncompleteReadError(b"", left)
                        break
                    left = left - len(data) if left > 0 else left
                    yield data
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError,
                asyncio.LimitOverrunError, TimeoutError) as exc:
            self._reusable = False
            raise TransportError(f"upstream answer broke off: {_describe(exc)}") from None
        self._finished = True

    async def read(self) -> bytes:
        """The whole body (a plain answer): one wait with the read timeout when its length is
        known, which is most answers and much cheaper than the piecewise reader."""
        if self._framing != "length":
            return b"".join([data async for data in self.iter_body()])
        try:
            async with asyncio.timeout(self._pool.read_timeout):
                data = await self._conn.reader.readexactly(self._length)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, TimeoutError) as exc:
            self._reusable = False
            raise TransportError(f"upstream answer broke off: {_describe(exc)}") from None
        self._finished = True
        return data

    def aclose(self) -> None:
        if self._finished and self._reusable and self._framing != "close":
            self._pool.release(self._conn)
        else:
            self._conn.close()


class UpstreamPool:
    """Keep-alive connections to one upstream origin, one request at a time on each."""

    def __init__(self, base_url: str, *, connect_timeout: float, read_timeout: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream base URL must be http(s)://host[:port][/path], "
                             f"got {base_url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        default_port = self.port == (443 if self.tls else 80)
        self.host_header = self.host if default_port else f"{self.host}:{self.port}"
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: list[_Conn] = []
        self._ssl = ssl.create_default_context() if self.tls else None

    async def _connect(self) -> _Conn:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self._ssl, limit=MAX_HEAD,
                                        server_hostname=self.host if self.tls else None),
                self.connect_timeout)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            where = f"{'https' if self.tls else 'http'}://{self.host_header}"
            raise TransportError(f"upstream {where} unreachable: {_describe(exc)}",
                                 fatal=True) from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(reader, writer)

    def release(self, conn: _Conn) -> None:
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    async def request(self, method: str, path: str, headers: list[tuple[str, str]],
                      body: bytes) -> UpstreamResponse:
        """Send one request and read the answer's head; the body is the caller's to read."""
        conn = None
        while self._idle:
            candidate = self._idle.pop()
            if candidate.usable():
                conn = candidate
                break
            candidate.close()
        if conn is None:
            conn = await self._connect()
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}",
                 f"Content-Length: {len(body)}", "Connection: keep-alive"]
        lines += [f"{k}: {v}" for k, v in headers]
        try:
            conn.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            async with asyncio.timeout(self.read_timeout):
                await conn.writer.drain()
                while True:
                    head = await conn.reader.readuntil(b"\r\n\r\n")
                    status, resp_headers = _parse_status(head)
                    if status >= 200:
                        break  # 1xx interim answers (100 Continue) are skipped
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError, BadRequest) as exc:
            conn.close()
            raise TransportError(f"upstream gave no answer: {_describe(exc)}") from None
        lower = {k.lower(): v for k, v in resp_headers}
        conn_tokens = {t.strip().lower() for t in lower.get("connection", "").split(",")}
        if "chunked" in lower.get("transfer-encoding", "").lower():
            framing, length = "chunked", 0
        elif "content-length" in lower:
            framing, length = "length", int(lower["content-length"])
        elif status in (204, 304):
            framing, length = "length", 0
        else:
            framing, length = "close", 0
        return UpstreamResponse(status, resp_headers, conn, self, framing, length,
                                _reusable="close" not in conn_tokens)


def _parse_status(head: bytes) -> tuple[int, list[tuple[str, str]]]:
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers.append((name.strip(), value.strip()))
    return int(parts[1]), headers


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "connection closed before the answer was complete"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
