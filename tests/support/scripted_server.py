"""A scripted, OpenAI-compatible HTTP server for tests.

This is a *real* HTTP/1.1 server on 127.0.0.1 (ephemeral port), run by an asyncio event
loop in a background thread. Tests point the official ``openai`` client (and assay's own
code) at :attr:`ScriptedServer.base_url`, so the whole client stack -- connection pooling,
keep-alive, retries, timeouts, error mapping -- is exercised exactly as against a real
provider, while every reply is decided by a small Python handler.

Only the standard library is used. The HTTP parser is deliberately small: request line,
headers, ``Content-Length`` or ``chunked`` bodies, keep-alive (several requests per
connection) unless the client asks for ``Connection: close``.

Typical use (tests/ is on sys.path, so import it as ``support.scripted_server``)::

    handler = by_input({"q1": [Status(429, {"Retry-After": "0.01"}), Answer('{"label": "bug"}')]})
    with ScriptedServer(handler) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test")
        ...
        assert len(server.requests_for("q1")) == 2
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal, TypeAlias

__all__ = [
    "ASK_THROUGH_GATEWAY",
    "Answer",
    "Chunks",
    "Drop",
    "Garbage",
    "Handler",
    "RecordedRequest",
    "Reply",
    "ScriptedServer",
    "Status",
    "by_input",
    "echo_label",
]

DEFAULT_MODEL = "scripted-model"

#: The start of a test agent (a ``command:`` agent's Python script) that asks the model once
#: through the gateway it was given, the way agents are told to (``OPENAI_BASE_URL``,
#: ``OPENAI_API_KEY``, ``ASSAY_MODEL``); the reply's text is left in ``text``.
ASK_THROUGH_GATEWAY = r"""
import json, os, subprocess, sys, time, urllib.request
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["ASSAY_MODEL"],
                     "messages": [{"role": "user", "content": "fix add"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
text = json.load(urllib.request.urlopen(req, timeout=30))["choices"][0]["message"]["content"]
"""


# --------------------------------------------------------------------------- replies


@dataclass
class Answer:
    """A normal 200 chat completion, shaped like OpenAI's response body."""

    content: str | None
    # Goes to the response "model": the model id the provider says it served.
    model: str = DEFAULT_MODEL
    # "auto": word counts of request/answer (deterministic, good enough for cost tests);
    # None: omit the "usage" key entirely (some providers do); a dict: sent verbatim.
    usage: dict | None | Literal["auto"] = "auto"
    system_fingerprint: str | None = None
    # Goes to choices[0].message.refusal.
    refusal: str | None = None
    finish_reason: str = "stop"
    # Seconds to wait before answering; awaited, so other connections are not blocked.
    delay: float = 0.0
    # Extra (for the gateway tests): tool calls in choices[0].message.tool_calls, each
    # {"id", "type": "function", "function": {"name", "arguments"}}, sent verbatim.
    tool_calls: list[dict] | None = None
    # Extra: for a request with "stream": true, whether the server honours
    # stream_options.include_usage (False plays a provider that never sends a usage chunk).
    stream_usage: bool = True
    # Extra: seconds between SSE chunks of a streamed reply (shows chunks pass as they come).
    chunk_delay: float = 0.0
    # Extra: how a streamed reply is framed: "chunked" (keep-alive, as providers do) or
    # "close" (no length at all, the end of the stream is the end of the connection).
    stream_framing: Literal["chunked", "close"] = "chunked"


@dataclass
class Status:
    """An HTTP error response (429, 500, 503, 400, 401, ...)."""

    code: int
    # Extra response headers, e.g. {"Retry-After": "0.2"}.
    headers: dict[str, str] = field(default_factory=dict)
    body: str = '{"error": {"message": "scripted error", "type": "server_error"}}'
    delay: float = 0.0


@dataclass
class Drop:
    """Read the request, then close the TCP connection without sending any response."""

    delay: float = 0.0


@dataclass
class Garbage:
    """A response whose body is not JSON (e.g. an HTML page from a misbehaving proxy)."""

    body: str = "<html>upstream proxy error</html>"
    content_type: str = "text/html"
    status: int = 200


@dataclass
class Chunks:
    """A 200 SSE stream of exactly these chat chunks, whatever the request asked: each one
    ``data: <its JSON>`` as it is (so a test can send what no honest provider would: an index
    of 10**8, a negative or a string one), a ``str`` sent as the event's text itself, then
    ``data: [DONE]``, chunked and kept alive."""

    chunks: list[Any]
    chunk_delay: float = 0.0
    delay: float = 0.0


Reply: TypeAlias = Answer | Status | Drop | Garbage | Chunks
_REPLY_TYPES = (Answer, Status, Drop, Garbage, Chunks)


# --------------------------------------------------------------------------- requests


@dataclass
class RecordedRequest:
    """One request as the server received it, so tests can assert on what was sent."""

    method: str
    # The request target as sent (path plus any query string).
    path: str
    # Header names lower-cased; repeated headers joined with ", ".
    headers: dict[str, str]
    # Parsed JSON body, or None when there was no body or it was not JSON.
    body: dict | None
    # time.monotonic() when the request was fully read.
    received_at: float
    # Extra (not in the original brief): 1-based id of the TCP connection the request
    # arrived on, so tests can check keep-alive reuse and concurrency.
    connection: int = 0
    # Extra: "ExcType: message" if the handler raised for this request (it got a 500).
    error: str | None = None

    @property
    def messages(self) -> list[dict]:
        """The chat messages sent (body["messages"]), or [] for non-chat requests."""
        if isinstance(self.body, dict):
            messages = self.body.get("messages")
            if isinstance(messages, list):
                return messages
        return []

    @property
    def case_input(self) -> str | None:
        """Content of the first "user" message: how assay requests identify their case."""
        for message in self.messages:
            if isinstance(message, dict) and message.get("role") == "user":
                return _content_text(message.get("content"))
        return None


def _content_text(content: Any) -> str | None:
    """Message content as text; list-of-parts content has its text parts joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        return "".join(texts)
    return str(content)


Handler: TypeAlias = Callable[[RecordedRequest, int], Reply]
"""Decides the reply to a chat request. The int is the 0-based number of earlier chat
requests with the same case_input, so a handler can script "first try 429, then answer"."""


# --------------------------------------------------------------------------- handlers


def by_input(
    script: Mapping[str, Reply | Sequence[Reply]],
    default: Reply | Handler | None = None,
) -> Handler:
    """Handler scripted per case input: the n-th request for an input gets the n-th reply
    of its list; the last one repeats. Inputs not in the script get `default` (a Reply or
    a handler); with no default -> Status(500), so an unscripted input is loud."""
    plan: dict[str, list[Reply]] = {}
    for case_input, replies in script.items():
        seq = [replies] if isinstance(replies, _REPLY_TYPES) else list(replies)
        if not seq:
            raise ValueError(f"by_input: empty reply list for input {case_input!r}")
        for reply in seq:
            if not isinstance(reply, _REPLY_TYPES):
                raise TypeError(f"by_input: for {case_input!r}: {_not_a_reply(reply)}")
        plan[case_input] = seq

    def handler(request: RecordedRequest, attempt: int) -> Reply:
        case_input = request.case_input
        if case_input is not None and case_input in plan:
            seq = plan[case_input]
            return seq[min(attempt, len(seq) - 1)]
        if default is None:
            message = f"by_input: no scripted reply for input {case_input!r}"
            return Status(500, body=json.dumps({"error": {"message": message, "type": "test"}}))
        if isinstance(default, _REPLY_TYPES):
            return default
        return default(request, attempt)

    return handler


def echo_label(
    field: str = "label",
    labels_by_input: Mapping[str, str] | None = None,
    fallback: str = "bug",
) -> Handler:
    """Answers '{"<field>": "<label>"}' where label = labels_by_input[case_input] when the
    input is in the mapping, else `fallback`: a well-behaved JSON-answering classifier."""
    labels = dict(labels_by_input or {})

    def handler(request: RecordedRequest, attempt: int) -> Reply:
        case_input = request.case_input
        label = labels.get(case_input, fallback) if case_input is not None else fallback
        return Answer(json.dumps({field: label}))

    return handler


# --------------------------------------------------------------------------- server


class _BadRequest(Exception):
    """The client sent something this small HTTP parser does not understand."""


_MAX_HEAD = 64 * 1024


class ScriptedServer:
    """OpenAI-compatible HTTP server on 127.0.0.1 whose chat replies come from `handler`.

    Runs its own asyncio loop in a daemon thread, so it works the same from sync and
    async tests. Use as a context manager, or call start()/stop().

    The handler is called on the server's loop thread, one request at a time: keep it
    fast and non-blocking, and script slowness with a reply's `delay` instead (delays are
    awaited, so they overlap across connections).
    """

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        models: Sequence[str] = (DEFAULT_MODEL,),
    ) -> None:
        # `models` is a Sequence with a tuple default (not a list) to avoid a shared
        # mutable default; any list works.
        self.handler: Handler = handler if handler is not None else echo_label()
        self.models: list[str] = list(models)
        # Every request received, in arrival order (appended under a lock).
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._input_counts: dict[str | None, int] = {}
        self._completion_ids = itertools.count(1)
        self._connection_ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self._port: int | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> ScriptedServer:
        """Bind an ephemeral port and serve in a background thread; returns self."""
        if self._thread is not None:
            raise RuntimeError("ScriptedServer already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._bind())
            except BaseException as exc:  # reported to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="scripted-server", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("ScriptedServer did not start within 10 s")
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Close the listener and every open connection, then join the thread."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        if thread.is_alive():
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        self._thread = None
        self._loop = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port (only valid after start())."""
        if self._port is None:
            raise RuntimeError("ScriptedServer is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """What to give the openai client as base_url: "http://127.0.0.1:<port>/v1"."""
        return f"http://127.0.0.1:{self.port}/v1"

    # ----------------------------------------------------------------- queries

    def chat_requests(self) -> list[RecordedRequest]:
        """Only the POST /v1/chat/completions requests, in order."""
        with self._lock:
            return [r for r in self.requests if _is_chat(r.method, r.path)]

    def open_connections(self) -> int:
        """TCP connections being served now (a killed client's close once the server has read
        what it had sent)."""
        return len(self._conn_tasks)

    def requests_for(self, case_input: str) -> list[RecordedRequest]:
        """Chat requests whose case_input (first user message) is `case_input`."""
        return [r for r in self.chat_requests() if r.case_input == case_input]

    # ----------------------------------------------------------------- internals

    async def _bind(self) -> None:
        self._server = await asyncio.start_server(
            self._on_connection, host="127.0.0.1", port=0, backlog=1024, limit=_MAX_HEAD
        )
        self._port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._conn_tasks):
            task.cancel()
        if self._conn_tasks:
            await asyncio.gather(*self._conn_tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conn_tasks.add(task)
        connection = next(self._connection_ids)
        try:
            await self._serve_connection(reader, writer, connection)
        except (asyncio.CancelledError, ConnectionError, OSError):
            pass
        finally:
            self._conn_tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: int
    ) -> None:
        while True:
            try:
                parsed = await _read_request(reader, writer)
            except _BadRequest as exc:
                error = {"error": {"message": f"bad request: {exc}", "type": "invalid_request"}}
                await _write(writer, 400, {}, json.dumps(error).encode(), close=True)
                return
            if parsed is None:  # clean EOF between requests
                return
            method, target, version, headers, raw_body = parsed
            body: dict | None = None
            if raw_body:
                try:
                    decoded = json.loads(raw_body)
                except (ValueError, RecursionError):  # not JSON, or nested too deep
                    decoded = None
                body = decoded if isinstance(decoded, dict) else None
            request = RecordedRequest(
                method=method,
                path=target,
                headers=headers,
                body=body,
                received_at=time.monotonic(),
                connection=connection,
            )
            keep_alive = _wants_keep_alive(version, headers)
            if not await self._respond(request, writer, keep_alive):
                return
            if not keep_alive:
                return

    async def _respond(
        self, request: RecordedRequest, writer: asyncio.StreamWriter, keep_alive: bool
    ) -> bool:
        """Record the request and send its response; False if the connection must close."""
        close = not keep_alive
        route = request.path.split("?", 1)[0].rstrip("/")
        if _is_chat(request.method, request.path):
            with self._lock:
                attempt = self._input_counts.get(request.case_input, 0)
                self._input_counts[request.case_input] = attempt + 1
                self.requests.append(request)
            try:
                reply = self.handler(request, attempt)
                if not isinstance(reply, _REPLY_TYPES):
                    raise TypeError(f"handler returned {_not_a_reply(reply)}")
            except Exception as exc:  # surfaced to the test as a 500
                request.error = f"{type(exc).__name__}: {exc}"
                error = {"error": {"message": request.error, "type": "scripted_handler_error"}}
                await _write(writer, 500, {}, json.dumps(error).encode(), close=close)
                return True
            return await self._send_reply(request, reply, writer, close)

        with self._lock:
            self.requests.append(request)
        if request.method == "GET" and route == "/v1/models":
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "scripted"}
                for m in self.models
            ]
            payload = json.dumps({"object": "list", "data": data}).encode()
            await _write(writer, 200, {}, payload, close=close)
        else:
            message = f"no route for {request.method} {request.path}"
            payload = json.dumps({"error": {"message": message, "type": "not_found"}}).encode()
            await _write(writer, 404, {}, payload, close=close)
        return True

    async def _send_reply(
        self, request: RecordedRequest, reply: Reply, writer: asyncio.StreamWriter, close: bool
    ) -> bool:
        delay = getattr(reply, "delay", 0.0)
        if delay > 0:
            await asyncio.sleep(delay)
        if isinstance(reply, Drop):
            # Abort (RST) rather than a graceful FIN, so the client sees a connection
            # failure immediately, with no response bytes at all.
            writer.transport.abort()
            return False
        if isinstance(reply, Status):
            await _write(writer, reply.code, reply.headers, reply.body.encode(), close=close)
        elif isinstance(reply, Garbage):
            headers = {"Content-Type": reply.content_type}
            await _write(writer, reply.status, headers, reply.body.encode(), close=close)
        elif isinstance(reply, Chunks):
            events = [c if isinstance(c, str) else f"data: {json.dumps(c)}"
                      for c in reply.chunks]
            await self._send_events(writer, events,
                                    chunked=True, close=close, chunk_delay=reply.chunk_delay)
            return not close
        elif isinstance(request.body, dict) and request.body.get("stream") is True:
            await self._stream(request, reply, writer, close)
            return not close and reply.stream_framing == "chunked"
        else:
            payload = json.dumps(self._completion(request, reply)).encode()
            await _write(writer, 200, {}, payload, close=close)
        return True

    async def _stream(
        self, request: RecordedRequest, answer: Answer, writer: asyncio.StreamWriter, close: bool
    ) -> None:
        """An SSE reply shaped like OpenAI's chunks, one event per write, so a client must
        read it as it comes. Built from the same body as the plain reply, so
        a test compares the two on equal terms."""
        full = self._completion(request, answer)
        base = {"id": full["id"], "object": "chat.completion.chunk",
                "created": full["created"], "model": full["model"],
                "system_fingerprint": full["system_fingerprint"]}

        def chunk(delta: dict, finish: str | None = None) -> dict:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**base, "choices": [choice]}

        events: list[dict] = [chunk({"role": "assistant", "content": ""})]
        words = (answer.content or "").split(" ") if answer.content else []
        events += [chunk({"content": w if i == 0 else " " + w}) for i, w in enumerate(words)]
        for i, call in enumerate(answer.tool_calls or []):
            fn = call.get("function", {})
            events.append(chunk({"tool_calls": [{
                "index": i, "id": call.get("id"), "type": call.get("type", "function"),
                "function": {"name": fn.get("name"), "arguments": ""}}]}))
            events.append(chunk({"tool_calls": [{
                "index": i, "function": {"arguments": fn.get("arguments", "")}}]}))
        events.append(chunk({}, answer.finish_reason))
        options = request.body.get("stream_options") if isinstance(request.body, dict) else None
        wants_usage = isinstance(options, dict) and options.get("include_usage") is True
        if wants_usage and answer.stream_usage and "usage" in full:
            events.append({**base, "choices": [], "usage": full["usage"]})
        await self._send_events(writer, [f"data: {json.dumps(e)}" for e in events],
                                chunked=answer.stream_framing == "chunked", close=close,
                                chunk_delay=answer.chunk_delay)

    async def _send_events(self, writer: asyncio.StreamWriter, events: list[str], *,
                           chunked: bool, close: bool, chunk_delay: float) -> None:
        """An SSE answer: each of ``events`` as one, then ``[DONE]``, one event a write."""
        framing = "Transfer-Encoding: chunked\r\n" if chunked else ""
        connection = "close" if close or not chunked else "keep-alive"
        head = ("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                f"Cache-Control: no-cache\r\n{framing}Connection: {connection}\r\n\r\n")
        writer.write(head.encode("latin-1"))
        await writer.drain()
        payloads = [f"{e}\n\n".encode() for e in events]
        for payload in [*payloads, b"data: [DONE]\n\n"]:
            writer.write(b"%x\r\n%s\r\n" % (len(payload), payload) if chunked else payload)
            await writer.drain()
            if chunk_delay > 0:
                await asyncio.sleep(chunk_delay)
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    def _completion(self, request: RecordedRequest, answer: Answer) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": f"chatcmpl-{next(self._completion_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": answer.model,
            "system_fingerprint": answer.system_fingerprint,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": answer.content,
                        "refusal": answer.refusal,
                        **({"tool_calls": answer.tool_calls} if answer.tool_calls else {}),
                    },
                    "logprobs": None,
                    "finish_reason": answer.finish_reason,
                }
            ],
        }
        if answer.usage == "auto":
            prompt = sum(
                _word_count(_content_text(m.get("content")))
                for m in request.messages
                if isinstance(m, dict)
            )
            completion = _word_count(answer.content)
            body["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        elif answer.usage is not None:
            body["usage"] = answer.usage
        return body


# --------------------------------------------------------------------------- HTTP/1.1


def _not_a_reply(reply: object) -> str:
    message = f"{reply!r} is not a Reply"
    if type(reply).__name__ in {t.__name__ for t in _REPLY_TYPES}:
        # Same class from a second copy of this module (tests.support... vs support...).
        message += (
            f"; it comes from module {type(reply).__module__!r} but the server is "
            f"{__name__!r}: import both from `support.scripted_server`"
        )
    return message


def _is_chat(method: str, target: str) -> bool:
    return method == "POST" and target.split("?", 1)[0].rstrip("/") == "/v1/chat/completions"


def _word_count(text: str | None) -> int:
    return len(text.split()) if text else 0


def _wants_keep_alive(version: str, headers: dict[str, str]) -> bool:
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    if version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens


async def _read_request(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> tuple[str, str, str, dict[str, str], bytes] | None:
    """Read one request; None on EOF before any byte of it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise _BadRequest("connection closed mid-headers") from exc
    except asyncio.LimitOverrunError as exc:
        raise _BadRequest("request head too large") from exc
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError as exc:
        raise _BadRequest(f"malformed request line {lines[0]!r}") from exc
    if not version.startswith("HTTP/1."):
        raise _BadRequest(f"unsupported protocol {version!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadRequest(f"malformed header line {line!r}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value

    if headers.get("expect", "").lower() == "100-continue":
        # curl and some clients wait for this before sending a large body.
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        else:
            length = int(headers.get("content-length", "0") or 0)
            if length < 0:
                raise _BadRequest("negative Content-Length")
            body = await reader.readexactly(length) if length else b""
    except asyncio.IncompleteReadError as exc:
        raise _BadRequest("connection closed mid-body") from exc
    except ValueError as exc:
        raise _BadRequest(f"bad body framing: {exc}") from exc
    return method, target, version, headers, body


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # Skip trailers up to the blank line.
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)  # CRLF after each chunk


async def _write(
    writer: asyncio.StreamWriter,
    code: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    close: bool,
) -> None:
    """Send one complete response with a Content-Length body."""
    try:
        reason = HTTPStatus(code).phrase
    except ValueError:
        reason = "Scripted"
    # Framing headers are always ours; a scripted Content-Length would corrupt the stream.
    out = {k: v for k, v in headers.items() if k.lower() not in ("content-length", "connection")}
    if not any(k.lower() == "content-type" for k in out):
        out["Content-Type"] = "application/json"
    out["Content-Length"] = str(len(body))
    out["Connection"] = "close" if close else "keep-alive"
    head = f"HTTP/1.1 {code} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in out.items())
    writer.write(head.encode("latin-1") + b"\r\n" + body)
    await writer.drain()
