"""An OpenAI-compatible server that answers every chat completion at once, for benchmarks.

Run it in its own process (it must not share a GIL with the client being measured)::

    python bench/instant_server.py --port 0     # prints "PORT <n>" on stdout once listening

Routes:

- ``POST /v1/chat/completions``: a fixed, valid ``chat.completion`` whose message content is
  ``{"label": "bug"}``, with usage. The request body is read (Content-Length) but not parsed.
- ``GET /v1/models``: one model, ``bench``.
- ``GET /stats``: ``{"count": chat requests since the last reset, "first_request": time.time()
  when the first of them arrived (null if none), "last_request": time.time() of the latest}``.
- ``POST /reset``: zero the stats.

The HTTP/1.1 parser is minimal on purpose (request line, headers, Content-Length bodies,
keep-alive, pipelining) and works on raw ``asyncio.Protocol`` buffers, so the server costs far
less per request than any Python client does. uvloop is used when it happens to be installed.
Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import stat
import sys
import time

CONTENT = '{"label": "bug"}'
MODEL = "bench"

_COMPLETION = json.dumps({
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": int(time.time()),
    "model": MODEL,
    "choices": [{
        "index": 0,
        "message": {"role": "assistant", "content": CONTENT, "refusal": None},
        "logprobs": None,
        "finish_reason": "stop",
    }],
    "usage": {"prompt_tokens": 250, "completion_tokens": 6, "total_tokens": 256},
}, separators=(",", ":")).encode()

_MODELS = json.dumps({
    "object": "list",
    "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "bench"}],
}).encode()


def _response(status: str, body: bytes, close: bool = False) -> bytes:
    head = (f"HTTP/1.1 {status}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            f"connection: {'close' if close else 'keep-alive'}\r\n\r\n")
    return head.encode() + body


COMPLETION_RESPONSE = _response("200 OK", _COMPLETION)
MODELS_RESPONSE = _response("200 OK", _MODELS)
RESET_RESPONSE = _response("200 OK", b'{"ok":true}')
NOT_FOUND_RESPONSE = _response("404 Not Found", b'{"error":{"message":"not found"}}')
BAD_REQUEST_RESPONSE = _response("400 Bad Request", b'{"error":{"message":"bad request"}}',
                                 close=True)


class Stats:
    count = 0
    first: float | None = None
    last: float | None = None

    @classmethod
    def reset(cls) -> None:
        cls.count = 0
        cls.first = None
        cls.last = None

    @classmethod
    def response(cls) -> bytes:
        body = json.dumps({"count": cls.count, "first_request": cls.first,
                           "last_request": cls.last}).encode()
        return _response("200 OK", body)


class HttpProtocol(asyncio.Protocol):
    __slots__ = ("transport", "buf")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        out: list[bytes] = []
        close = False
        while True:
            head_end = buf.find(b"\r\n\r\n")
            if head_end == -1:
                break
            head = buf[:head_end]
            length = 0
            # Content-Length, case-insensitively; no chunked bodies (clients here never send them).
            lower = head.lower()
            i = lower.find(b"\r\ncontent-length:")
            if i != -1:
                j = lower.find(b"\r\n", i + 2)
                try:
                    length = int(head[i + 17: j if j != -1 else len(head)])
                except ValueError:
                    out.append(BAD_REQUEST_RESPONSE)
                    close = True
                    buf = b""
                    break
            total = head_end + 4 + length
            if len(buf) < total:
                break
            line_end = head.find(b"\r\n")
            request_line = head if line_end == -1 else head[:line_end]
            buf = buf[total:]
            method, _, rest = request_line.partition(b" ")
            path = rest.partition(b" ")[0]
            if method == b"POST" and path.endswith(b"/chat/completions"):
                now = time.time()
                if Stats.first is None:
                    Stats.first = now
                Stats.last = now
                Stats.count += 1
                out.append(COMPLETION_RESPONSE)
            elif method == b"GET" and path.endswith(b"/models"):
                out.append(MODELS_RESPONSE)
            elif method == b"GET" and path == b"/stats":
                out.append(Stats.response())
            elif method == b"POST" and path == b"/reset":
                Stats.reset()
                out.append(RESET_RESPONSE)
            else:
                out.append(NOT_FOUND_RESPONSE)
            if b"\r\nconnection: close" in lower:
                close = True
                buf = b""
                break
        self.buf = buf
        if out and self.transport is not None:
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])
            if close:
                self.transport.close()


class _EofWatch(asyncio.Protocol):
    """Stops the server when its stdin pipe closes, i.e. when the parent died without cleanup."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop.set()


async def serve(host: str, port: int, exit_on_stdin_eof: bool = False) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(HttpProtocol, host, port, backlog=1024, reuse_address=True)
    actual = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"PORT {actual}\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    mode = os.fstat(sys.stdin.fileno()).st_mode
    if exit_on_stdin_eof and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        await loop.connect_read_pipe(lambda: _EofWatch(stop), sys.stdin)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="stop when stdin (a pipe) closes: the parent died")
    args = parser.parse_args()
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        asyncio.run(serve(args.host, args.port, args.exit_on_stdin_eof))
    else:
        uvloop.run(serve(args.host, args.port, args.exit_on_stdin_eof))


if __name__ == "__main__":
    main()
