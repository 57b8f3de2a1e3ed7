"""HTTP/1.1 for the gateway, both sides, parsed by llhttp (``httptools``) on asyncio streams.

Every byte an agent sends and every byte an upstream answers goes through ``httptools`` (the
C parser behind Node.js, strict by default): nothing here splits lines or reads a
``Content-Length`` by hand. What llhttp refuses, the gateway refuses with a 400 before any byte
goes upstream: CR, LF or NUL inside a header name or value (a bare line feed is not a line
end), obsolete line folding, duplicated or conflicting ``Content-Length``,
``Transfer-Encoding`` together with ``Content-Length``, an invalid chunk, an ``Upgrade`` or
``CONNECT``. Both the agent's request and the upstream's answer are parsed in full before
anything of them is trusted, and what the gateway writes (the upstream request, the answer to
the agent) is built only from values that parser accepted or from the gateway's own
constants, each checked again for CR, LF and NUL as it is written.

Why httptools over h11 (both maintained): measured on this machine, h11 costs about 35 us to
parse one small chat request and about 45 us to parse its answer, httptools about 4 us and
1 us; the gateway's budget ("p50 added under 2 ms, throughput at least 90% of direct",
``bench/gateway_overhead.py``) is spent mostly elsewhere and h11 would have used up its
margin. llhttp is also stricter out of the box (h11 takes a bare LF as a line end and
merges folded lines).

Bounds on what an agent can make the gateway hold or wait for (``ServerLimits``, defaults
below, documented in docs/guide/security.md):

- the request head: ``MAX_HEAD`` bytes (431 past it), ``MAX_HEADERS`` header fields;
- the request body: ``request_body_bytes`` (32 MiB by default, ``limits.request_body_mib`` in
  an experiment): a ``Content-Length`` above it is answered 413 before a byte of the body is
  read, a chunked body is read as it arrives and answered 413 the moment it passes the limit;
  the connection is closed after either;
- time: a request head must be complete within ``header_timeout`` (10 s) of its first byte
  (and a new connection must send a complete first head within that time of connecting: a
  slow-loris client is answered 408 and dropped), a body within ``body_timeout`` (60 s), and an
  idle keep-alive connection is closed after ``idle_timeout`` (120 s).

Upstream answers: a plain (non-streamed) answer is buffered up to ``MAX_RESPONSE`` (64 MiB)
and the call fails with a ``TransportError`` past it; a streamed answer is handed on piece by
piece as it arrives and never buffered whole.

Why not httpx on the upstream side: one keep-alive request to an instant local server costs
about 1.2 ms through ``httpx.AsyncClient`` and about 0.13 ms on a bare asyncio connection. What
a model API needs is small: one request at a time per connection, keep-alive reuse, TLS with
SNI from the standard library. Proxies are not supported: the gateway connects directly.

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
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

import httptools

from assay.errors import TransportError

MAX_HEAD = 64 * 1024
MAX_HEADERS = 100
#: The most of a plain (non-streamed) upstream answer the gateway holds at once.
MAX_RESPONSE = 64 * 1024 * 1024
READ_SIZE = 64 * 1024
#: Idle upstream connections older than this are not reused: servers drop idle ones (uvicorn,
#: under most local model servers, after 5 s), and a request written into a connection the
#: server is closing fails without an answer. Reconnecting costs far less than a model call.
IDLE_SECONDS = 4.0

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "content-length", "host", "expect",
})
_FORBIDDEN = (b"\r", b"\n", b"\0")


class BadRequest(Exception):  # noqa: N818 - internal signal, never leaves the gateway
    """The agent sent something the gateway does not take. ``status`` is what it is answered
    with (400 malformed, 408 too slow, 413 body too large, 431 head too large), ``reason``
    the gateway event's reason, ``head`` what was parsed of the request (its headers name the
    attempt, when it carried a token)."""

    def __init__(self, message: str, *, status: int = 400, reason: str = "malformed",
                 head: Request | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.head = head


@dataclass(frozen=True)
class ServerLimits:
    """What one agent connection may make the gateway hold or wait for."""

    request_body_bytes: int = 32 * 1024 * 1024
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    idle_timeout: float = 120.0

    def __post_init__(self) -> None:
        for name in ("request_body_bytes", "header_timeout", "body_timeout", "idle_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be above 0, not {getattr(self, name)!r}")


@dataclass
class Request:
    """One request from an agent, as llhttp parsed it."""

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
        """The query string without its ``?`` ("" when there is none)."""
        return self.target.partition("?")[2]


class AgentConnection:
    """The agent's side of one connection: requests read through llhttp under the bounds of
    ``ServerLimits``; ``next_request`` raises ``BadRequest`` for anything refused, after which
    the connection is to be answered and closed (the parser cannot resync)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 limits: ServerLimits, on_head: Callable[[int], None] | None = None) -> None:
        self.reader, self.writer, self.limits = reader, writer, limits
        self._parser = httptools.HttpRequestParser(self)
        self._ready: deque[Request] = deque()
        self._started = time.monotonic()
        self._served = 0
        # A connection owes a head from the moment it is accepted, and again from the first
        # byte of each later request until that head is complete: ``on_head`` is told +1 and
        # -1 as that changes (the owner counts an attempt's unfinished heads with it; the
        # +1 of the accept is the owner's own, so a connection counts before its first byte).
        self.head_pending = True
        self._on_head = on_head
        self._reset()

    def _head_owed(self, owed: bool) -> None:
        if owed != self.head_pending:
            self.head_pending = owed
            if self._on_head is not None:
                self._on_head(1 if owed else -1)

    def _reset(self) -> None:
        self._in_message = False
        self._head_done = False
        self._url = b""
        self._headers: dict[str, str] = {}
        self._nheaders = 0
        self._body: list[bytes] = []
        self._body_size = 0
        self._head_bytes = 0  # bytes read while the head was incomplete
        self._head_size = 0  # bytes of URL and header fields the parser handed over
        self._head: Request | None = None
        self._refusal: BadRequest | None = None
        self._message_started = 0.0

    # ---------------------------------------------------------------- llhttp callbacks

    def on_message_begin(self) -> None:
        self._in_message = True
        self._head_owed(True)
        self._message_started = time.monotonic()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._parsed_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._nheaders += 1
        if self._nheaders > MAX_HEADERS:
            self._refusal = BadRequest(f"more than {MAX_HEADERS} header fields", status=431,
                                       reason="head_too_large")
            raise self._refusal
        self._parsed_head(len(name) + len(value) + 4)
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def _parsed_head(self, size: int) -> None:
        """Count what the parser took of the head (a head that arrived whole in one read
        never meets the per-read count in ``next_request``)."""
        self._head_size += size
        if self._head_size > MAX_HEAD:
            self._refusal = BadRequest(f"request head over {MAX_HEAD} bytes", status=431,
                                       reason="head_too_large")
            raise self._refusal

    def on_headers_complete(self) -> None:
        self._head_done = True
        self._head_owed(False)
        parser = self._parser
        method = parser.get_method().decode("latin-1")
        target = self._url.decode("latin-1")
        head = Request(method, target, self._headers, b"", parser.should_keep_alive())
        self._head = head
        if parser.get_http_version() not in ("1.1", "1.0"):
            self._refusal = BadRequest("only HTTP/1.0 and 1.1 are served", head=head)
            raise self._refusal
        if not target.startswith("/") or "#" in target:
            # (the target itself is not quoted: an event's detail never holds what could be
            # a token)
            self._refusal = BadRequest("request target must be a path (origin form, no "
                                       "fragment)", head=head)
            raise self._refusal
        length = self._headers.get("content-length")
        limit = self.limits.request_body_bytes
        if length is not None and int(length) > limit:  # llhttp checked it is digits
            self._refusal = BadRequest(
                f"request body of {int(length)} bytes is over the gateway's limit of "
                f"{limit} bytes", status=413, reason="body_too_large", head=head)
            raise self._refusal
        if self._headers.get("expect", "").lower() == "100-continue":
            self.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits for it

    def on_body(self, data: bytes) -> None:
        self._body_size += len(data)
        if self._body_size > self.limits.request_body_bytes:
            self._refusal = BadRequest(
                f"request body over the gateway's limit of {self.limits.request_body_bytes} "
                "bytes", status=413, reason="body_too_large", head=self._head)
            raise self._refusal
        self._body.append(data)

    def on_message_complete(self) -> None:
        head = self._head
        assert head is not None
        head.body = b"".join(self._body)
        self._ready.append(head)
        self._served += 1
        self._reset()

    # ---------------------------------------------------------------- reading

    def _deadline(self) -> tuple[float, str, int]:
        """When the current wait ends, what it is called, and its status."""
        lim = self.limits
        if self._in_message and not self._head_done:
            return self._message_started + lim.header_timeout, "header_timeout", 408
        if self._in_message:
            return self._message_started + lim.header_timeout + lim.body_timeout, \
                "body_timeout", 408
        if self._served == 0:  # a new connection owes its first head promptly
            return self._started + lim.header_timeout, "header_timeout", 408
        return time.monotonic() + lim.idle_timeout, "idle", 0

    async def next_request(self) -> Request | None:
        """The next whole request; None when the agent closed (or idled out) between requests."""
        while not self._ready:
            deadline, what, status = self._deadline()
            try:
                async with asyncio.timeout_at(_loop_time(deadline)):
                    data = await self.reader.read(READ_SIZE)
            except TimeoutError:
                if what == "idle":
                    return None
                raise BadRequest(f"request not received in time ({what.replace('_', ' ')})",
                                 status=status, reason=what, head=self._head) from None
            if not data:
                if self._in_message:
                    raise BadRequest("connection closed mid-request", head=self._head)
                return None
            if not self._head_done:
                self._head_bytes += len(data)
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                raise BadRequest("Upgrade and CONNECT are not served", head=self._head) from None
            except httptools.HttpParserError as exc:
                if self._refusal is not None:
                    raise self._refusal from None
                raise BadRequest(f"malformed HTTP: {_parser_message(exc)}",
                                 head=self._head) from None
            if not self._head_done and self._in_message and self._head_bytes > MAX_HEAD:
                raise BadRequest(f"request head over {MAX_HEAD} bytes", status=431,
                                 reason="head_too_large")
        return self._ready.popleft()


def _loop_time(monotonic_deadline: float) -> float:
    """A ``time.monotonic`` deadline on the running loop's clock."""
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_deadline - time.monotonic())


def _parser_message(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:200]


def checked(text: str) -> str:
    """``text`` if it may be written into an HTTP head field; a ValueError if it holds CR, LF
    or NUL (the last line of defence: every value written is also parsed or constant)."""
    if "\r" in text or "\n" in text or "\0" in text:
        raise ValueError("CR, LF or NUL in an HTTP head field")
    return text


def head_bytes(lines: list[str]) -> bytes:
    """A head from its lines, refused (ValueError) when any line holds CR, LF or NUL: the
    whole head then has exactly one CRLF per line and one more, and nothing else of them."""
    text = "\r\n".join(lines) + "\r\n\r\n"
    ends = len(lines) + 1
    if text.count("\n") != ends or text.count("\r") != ends or "\0" in text:
        raise ValueError("CR, LF or NUL in an HTTP head field")
    return text.encode("latin-1")


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
    return head_bytes(out)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


LAST_CHUNK = b"0\r\n\r\n"


# ------------------------------------------------------------------------------- upstream


class _ResponseReader:
    """llhttp callbacks for one upstream connection's answers."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.reset()

    def reset(self) -> None:
        self.headers: list[tuple[str, str]] = []
        self.head_done = False
        self.complete = False
        self.pieces: list[bytes] = []
        self.status = 0
        self.keep_alive = True
        self.framed = True  # a Content-Length or chunked body (else: until the connection ends)
        self.extra = False

    def on_message_begin(self) -> None:
        # bytes after a complete answer are an answer nobody asked for: the connection is
        # not reused, so no later call can receive it
        self.extra = self.extra or self.complete

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.extra:
            return
        if len(self.headers) >= MAX_HEADERS:
            raise ValueError(f"more than {MAX_HEADERS} header fields")
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        if self.extra:
            return
        self.status = self.parser.get_status_code()
        if self.status < 200:
            self.headers.clear()  # an interim answer (100 Continue): the real one follows
            return
        self.head_done = True
        self.keep_alive = self.parser.should_keep_alive()
        names = {k.lower() for k, _ in self.headers}
        self.framed = ("content-length" in names or "transfer-encoding" in names
                       or self.status in (204, 304))

    def on_body(self, data: bytes) -> None:
        if not self.extra:
            self.pieces.append(data)

    def on_message_complete(self) -> None:
        if self.head_done:
            self.complete = True


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    parse: _ResponseReader = field(default_factory=_ResponseReader)
    idle_since: float = 0.0

    def usable(self) -> bool:
        return (not self.reader.at_eof() and not self.writer.is_closing()
                and time.monotonic() - self.idle_since < IDLE_SECONDS)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()

    async def feed(self, timeout: float) -> bool:
        """Read once and parse; False at the end of the connection."""
        async with asyncio.timeout(timeout):
            data = await self.reader.read(READ_SIZE)
        if not data:
            return False
        try:
            self.parse.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raise ValueError(f"malformed answer: {_parser_message(exc)}") from None
        return True


@dataclass
class UpstreamResponse:
    """An answer whose body is read as it arrives; ``aclose`` returns the connection."""

    status: int
    headers: list[tuple[str, str]]
    _conn: _Conn
    _pool: UpstreamPool
    _finished: bool = False
    _reusable: bool = True

    def header(self, name: str) -> str:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return ""

    async def iter_body(self) -> AsyncIterator[bytes]:
        """The body as it arrives; each wait for the next piece has the read timeout."""
        conn, parse = self._conn, self._conn.parse
        try:
            while True:
                if parse.pieces:
                    pieces, parse.pieces = parse.pieces, []
                    for piece in pieces:
                        yield piece
                if parse.complete:
                    break
                if not await conn.feed(self._pool.read_timeout):
                    if parse.framed:
                        raise asyncio.IncompleteReadError(b"", None)
                    self._reusable = False
                    break  # a close-delimited body ends with its connection
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError,
                TimeoutError) as exc:
            self._reusable = False
            raise TransportError(f"upstream answer broke off: {_describe(exc)}") from None
        self._finished = True

    async def read(self, limit: int = MAX_RESPONSE) -> bytes:
        """The whole body of a plain answer, held only up to ``limit`` bytes."""
        out: list[bytes] = []
        size = 0
        async for piece in self.iter_body():
            size += len(piece)
            if size > limit:
                self._reusable = False
                raise TransportError(f"upstream answer over {limit} bytes")
            out.append(piece)
        return b"".join(out)

    def aclose(self) -> None:
        parse = self._conn.parse
        if self._finished and self._reusable and parse.keep_alive and not parse.extra:
            parse.reset()
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
        if parts.query or parts.fragment:
            raise ValueError("upstream base URL must not carry a query or fragment")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = checked(parts.path.rstrip("/"))
        default_port = self.port == (443 if self.tls else 80)
        self.host_header = checked(self.host if default_port else f"{self.host}:{self.port}")
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

    def close_stale(self) -> int:
        """Close the idle connections too old to be used again (``IDLE_SECONDS``) and return
        how many are left. A pool is used again only by a later request to its origin, which a
        run may never make (a replay arm's URL names one task): without this its last
        connection, with its buffers and descriptor, stayed open until the gateway stopped.
        On the gateway's loop, like every use of the pool."""
        keep = []
        for conn in self._idle:
            if conn.usable():
                keep.append(conn)
            else:
                conn.close()
        self._idle = keep
        return len(keep)

    async def request(self, method: str, path: str, headers: list[tuple[str, str]],
                      body: bytes) -> UpstreamResponse:
        """Send one request and read the answer's head; the body is the caller's to read.
        The head is written only if no field holds CR, LF or NUL (``head_bytes``)."""
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}",
                 f"Content-Length: {len(body)}", "Connection: keep-alive"]
        lines += [f"{k}: {v}" for k, v in headers]
        head = head_bytes(lines)
        conn = None
        while self._idle:
            candidate = self._idle.pop()
            if candidate.usable():
                conn = candidate
                break
            candidate.close()
        if conn is None:
            conn = await self._connect()
        parse = conn.parse
        try:
            conn.writer.write(head + body)
            async with asyncio.timeout(self.read_timeout):
                await conn.writer.drain()
                got = 0
                while not parse.head_done:
                    data = await conn.reader.read(READ_SIZE)
                    if not data:
                        raise asyncio.IncompleteReadError(b"", None)
                    got += len(data)
                    try:
                        parse.parser.feed_data(data)
                    except httptools.HttpParserError as exc:
                        raise ValueError(f"malformed answer: {_parser_message(exc)}") from None
                    if not parse.head_done and got > MAX_HEAD:
                        raise ValueError(f"answer head over {MAX_HEAD} bytes")
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            conn.close()
            raise TransportError(f"upstream gave no answer: {_describe(exc)}") from None
        return UpstreamResponse(parse.status, parse.headers, conn, self)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "connection closed before the answer was complete"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
