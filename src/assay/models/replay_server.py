"""``builtin/replay`` over HTTP: the rehearsal model behind the same gateway path as a real one.

One server per experiment run, on an ephemeral 127.0.0.1 port, holding every replay arm's
scripts; each script has its own base URL, ``http://127.0.0.1:PORT/<key>/v1`` (the runner's key
is ``<arm>/<task>``), which the gateway uses as that attempt's upstream exactly as it would a
provider's. It answers ``POST /v1/chat/completions``, ``/v1/responses``, ``/v1/messages`` (plain
and SSE) and ``/v1/messages/count_tokens``, and ``GET /v1/models``.

It runs in threads of the runner's process rather than a child: its answers take microseconds,
so it never competes with the agents for the interpreter, and nothing of it can outlive the run.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from assay.models import replay_wire as wire
from assay.models.json_reply import send_json
from assay.models.replay_script import REPLAY_MODEL, ReplayBook, Script

_ROUTES = {"/chat/completions": "chat", "/responses": "responses", "/messages": "anthropic",
           "/messages/count_tokens": "count_tokens"}
#: Responses answered, remembered for ``previous_response_id`` (oldest forgotten first).
_REMEMBER = 10_000


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _ReplayHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        send_json(self, status, payload)

    def _route(self) -> tuple[Script | None, str]:
        path = self.path.split("?", 1)[0].rstrip("/")
        for rest in (*_ROUTES, "/models"):
            if path.endswith("/v1" + rest):
                return self.server.scripts.get(path[1:-len("/v1" + rest)]), rest
        return None, ""

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        script, rest = self._route()
        if script is not None and rest == "/models":
            self._json(200, {"object": "list", "data": [
                {"id": REPLAY_MODEL, "object": "model", "created": 0, "owned_by": "assay"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        script, rest = self._route()
        kind = _ROUTES.get(rest)
        if script is None or kind is None:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise TypeError("the body is not a JSON object")
        except (ValueError, TypeError, RecursionError) as exc:  # an agent's bytes: any
            self._json(400, {"error": {"message": f"bad request: {exc}",
                                       "type": "invalid_request_error"}})
            return
        if kind == "count_tokens":
            conversation = [body.get("system"), body.get("messages")]
            self._json(200, {"input_tokens": sum(wire.pieces(s)
                                                 for s in wire.strings(conversation))})
            return
        model = named if isinstance(named := body.get("model"), str) else REPLAY_MODEL
        rid = f"replay{next(self.server.ids)}"
        previous = None
        if kind == "responses" and isinstance(body.get("previous_response_id"), str):
            previous = self.server.turn_of(body["previous_response_id"])
        got = wire.answer(script, kind, body, previous)
        if kind == "responses":
            self.server.remember(f"resp_{rid}", got.turn)
        stream = body.get("stream") is True
        if not stream:
            render = {"chat": wire.chat_plain, "responses": wire.responses_plain,
                      "anthropic": wire.anthropic_plain}[kind]
            self._json(200, render(got, model, rid))
            return
        if kind == "chat":
            options = body.get("stream_options")
            events = wire.chat_events(got, model, rid, include_usage=isinstance(options, dict)
                                      and options.get("include_usage") is True)
        elif kind == "responses":
            events = wire.responses_events(got, model, rid)
        else:
            events = wire.anthropic_events(got, model, rid)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _ReplayHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, scripts: Mapping[str, Script]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.scripts = dict(scripts)
        self.ids = itertools.count(1)
        self._turns: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, response_id: str, turn: int) -> None:
        with self._lock:
            self._turns[response_id] = turn
            while len(self._turns) > _REMEMBER:
                self._turns.popitem(last=False)

    def turn_of(self, response_id: str) -> int | None:
        with self._lock:
            return self._turns.get(response_id)


class ReplayServer:
    """``with ReplayServer({"arm/task": script}) as srv: srv.base_url("arm/task")``."""

    def __init__(self, scripts: Mapping[str, Script]) -> None:
        for key in scripts:
            if not key or "/v1" in key or key.startswith("/") or "?" in key:
                raise ValueError(f"replay script key {key!r} is not a path")
        self._server = _ReplayHTTPServer(scripts)
        self._thread: threading.Thread | None = None

    def base_url(self, key: str) -> str:
        if key not in self._server.scripts:
            raise ValueError(f"no replay script under {key!r}")
        host, port = self._server.socket.getsockname()[:2]  # an AF_INET (host, port)
        return f"http://{host}:{port}/{key}/v1"

    def __enter__(self) -> ReplayServer:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="assay-replay")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)


def serve_replay(books: Mapping[str, ReplayBook | None],
                 ) -> contextlib.AbstractContextManager[ReplayServer | None]:
    """One server for every replay arm's scripts, keyed ``<arm>/<task>``; a context of None
    when no arm replays."""
    scripts = {f"{arm}/{task}": script for arm, book in books.items() if book is not None
               for task, script in book.scripts.items()}
    return ReplayServer(scripts) if scripts else contextlib.nullcontext(None)


__all__ = ["ReplayServer", "serve_replay"]
