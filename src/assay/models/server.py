"""``assay serve``: built-in models behind an OpenAI-compatible HTTP API on 127.0.0.1.

Serving the built-in models over real HTTP (instead of calling them in-process) means the
baseline's numbers come out of the very same client, retry, parser and record code as a hosted
model's, so the comparison is like for like.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import signal
import socket
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from assay.models.builtin import BuiltinModel
from assay.models.json_reply import send_json


def _words(text: str) -> int:
    return len(text.split())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses connections
    # Headers and body go out as two writes; with Nagle's algorithm the body then waits for the
    # client's delayed ACK (~40 ms), which the report would show as model latency.
    disable_nagle_algorithm = True
    server: _ModelServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # a server per run must not scribble over the progress bar

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        send_json(self, status, payload)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            model = self.server.model
            self._send(200, {"object": "list", "data": [
                {"id": model.name, "object": "model", "created": 0, "owned_by": "assay"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            req = json.loads(raw)
            messages = req["messages"]
            if not isinstance(messages, list):
                raise TypeError("messages must be a list")
        except (ValueError, KeyError, TypeError) as exc:
            self._send(400, {"error": {"message": f"bad request: {exc}",
                                       "type": "invalid_request_error"}})
            return
        model = self.server.model
        content = model.answer(messages)
        prompt_words = sum(_words(str(m.get("content") or "")) for m in messages)
        self._send(200, {
            "id": f"chatcmpl-{next(self.server.counter)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model.name,
            "system_fingerprint": model.fingerprint,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            # Word counts, not tokens: the built-ins have no tokenizer (docs/guide/narrow.md
            # says so).
            "usage": {"prompt_tokens": prompt_words, "completion_tokens": _words(content),
                      "total_tokens": prompt_words + _words(content)},
        })


class _ModelServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The stdlib default backlog of 5 makes concurrent clients wait ~1 s on SYN retries, which
    # would show up as fake model latency in the baseline's report.
    request_queue_size = 256

    def __init__(self, model: BuiltinModel, host: str, port: int,
                 bind_and_activate: bool = True) -> None:
        super().__init__((host, port), _Handler, bind_and_activate=bind_and_activate)
        self.model = model
        self.counter = itertools.count(1)


def _serve_socket(model: BuiltinModel, sock: socket.socket) -> None:
    """Child process body: serve on the socket the parent bound (so the parent knows the port
    before the child exists). Ctrl-C is the parent's to handle; it stops us with SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's "raise KeyboardInterrupt"
    host, port = sock.getsockname()[:2]
    server = _ModelServer(model, host, port, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.serve_forever()


class BackgroundServer:
    """A model server on an ephemeral loopback port for the length of a ``with`` block.

    It runs in a forked child process: in a thread it would share the client's interpreter
    lock, and the waiting would show up in the report as model latency."""

    def __init__(self, model: BuiltinModel, host: str = "127.0.0.1", port: int = 0) -> None:
        self._model = model
        self._sock = socket.create_server((host, port), backlog=256)
        self._proc: multiprocessing.process.BaseProcess | None = None

    @property
    def base_url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> BackgroundServer:
        ctx = multiprocessing.get_context("fork")
        self._proc = ctx.Process(target=_serve_socket, args=(self._model, self._sock),
                                 daemon=True, name="assay-builtin-server")
        self._proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(5)
        self._sock.close()


def serve_forever(model: BuiltinModel, host: str, port: int,
                  ready: Callable[[int], None] | None = None) -> None:
    server = _ModelServer(model, host, port)
    if ready is not None:
        ready(server.server_address[1])
    try:
        server.serve_forever()
    finally:
        server.server_close()


__all__ = ["BackgroundServer", "serve_forever"]
