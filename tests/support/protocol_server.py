"""A scripted upstream that speaks the OpenAI Responses API and Anthropic Messages, for tests.

The sibling of ``scripted_server.py`` (which speaks chat completions): a real HTTP/1.1 server on
127.0.0.1 in a background thread, built on that module's request reader and writer. Each reply
is a ``Turn`` (text and/or tool calls, and the usage object to report, verbatim) rendered in the
wire shape of the path it was asked on, plain JSON or SSE as the request asks; the shapes are
written out here by hand from the providers' documentation and ``shared/ref/agent-clis.md``,
independently of assay's own ``builtin/replay`` renderer, so a test of one checks the other.

    with ProtocolServer(lambda req, n: Turn(text="done", usage={...})) as up:
        ...  # POST {up.base_url}/responses, {up.base_url}/messages, .../messages/count_tokens
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from support.scripted_server import RecordedRequest, Status, _read_request, _write


@dataclass
class Turn:
    """One model answer. ``usage`` is sent verbatim; None leaves it out."""

    text: str | None = None
    # each {"id", "name", "arguments": dict}
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    # Anthropic: usage of message_start (input side); ``usage`` then goes to message_delta
    start_usage: dict[str, Any] | None = None
    model: str = "upstream-model"
    # SSE: close the connection after this many events (a stream cut short)
    cut_after: int | None = None
    chunk_delay: float = 0.0
    # SSE: these (event name, data) pairs exactly, instead of the ones rendered from the turn
    # (a stream no honest provider would send)
    events: list[tuple[str, Any]] | None = None


Reply: TypeAlias = Turn | Status
Handler: TypeAlias = Callable[[RecordedRequest, int], Reply]


class ProtocolServer:
    """Answers ``/v1/responses``, ``/v1/messages`` and ``/v1/messages/count_tokens``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self._conns: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    def __enter__(self) -> ProtocolServer:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            server = loop.run_until_complete(asyncio.start_server(self._conn, "127.0.0.1", 0))
            self._port = server.sockets[0].getsockname()[1]
            ready.set()
            try:
                loop.run_forever()
            finally:
                server.close()
                for task in list(self._conns):
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*self._conns, return_exceptions=True))
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, daemon=True, name="protocol-server")
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def model_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.method == "POST"]

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while True:
                parsed = await _read_request(reader, writer)
                if parsed is None:
                    return
                method, target, _, headers, raw = parsed
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                req = RecordedRequest(method, target, headers, body, time.monotonic())
                with self._lock:
                    n = sum(1 for r in self.requests if r.path == target)
                    self.requests.append(req)
                if not await self._answer(req, n, writer):
                    return
        except (asyncio.CancelledError, ConnectionError, OSError):
            pass
        finally:
            self._conns.discard(task)
            writer.close()

    async def _answer(self, req: RecordedRequest, n: int, writer: asyncio.StreamWriter) -> bool:
        route = req.path.split("?", 1)[0]
        if route == "/v1/messages/count_tokens":
            await _write(writer, 200, {}, json.dumps({"input_tokens": 42}).encode(), close=False)
            return True
        if route not in ("/v1/responses", "/v1/messages"):
            await _write(writer, 404, {}, b'{"error": "no route"}', close=False)
            return True
        reply = self.handler(req, n)
        if isinstance(reply, Status):
            await _write(writer, reply.code, reply.headers, reply.body.encode(), close=False)
            return True
        rid = next(self._ids)
        anthropic = route == "/v1/messages"
        stream = isinstance(req.body, dict) and req.body.get("stream") is True
        if not stream:
            body = anthropic_message(reply, rid) if anthropic else responses_body(reply, rid)
            await _write(writer, 200, {}, json.dumps(body).encode(), close=False)
            return True
        events = anthropic_events(reply, rid) if anthropic else responses_events(reply, rid)
        if reply.events is not None:
            events = reply.events
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")
        for i, (name, data) in enumerate(events):
            if reply.cut_after is not None and i >= reply.cut_after:
                writer.transport.abort()
                return False
            piece = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


# ------------------------------------------------------------------------ Responses API


def _responses_items(turn: Turn, rid: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.text is not None:
        items.append({"type": "message", "id": f"msg_{rid}", "status": "completed",
                      "role": "assistant",
                      "content": [{"type": "output_text", "text": turn.text,
                                   "annotations": []}]})
    for call in turn.tool_calls:
        items.append({"type": "function_call", "id": f"fc_{call['id']}", "status": "completed",
                      "call_id": call["id"], "name": call["name"],
                      "arguments": json.dumps(call["arguments"])})
    return items


def responses_body(turn: Turn, rid: int, status: str = "completed") -> dict[str, Any]:
    body: dict[str, Any] = {"id": f"resp_{rid}", "object": "response", "created_at": 0,
                            "status": status, "model": turn.model,
                            "output": _responses_items(turn, rid)}
    if turn.usage is not None:
        body["usage"] = turn.usage
    return body


def responses_events(turn: Turn, rid: int) -> list[tuple[str, dict[str, Any]]]:
    seq = itertools.count()
    shell = {**responses_body(turn, rid, "in_progress"), "output": []}
    shell.pop("usage", None)
    out: list[tuple[str, dict[str, Any]]] = []

    def ev(kind: str, **data: Any) -> None:
        out.append((kind, {"type": kind, "sequence_number": next(seq), **data}))

    ev("response.created", response=shell)
    ev("response.in_progress", response=shell)
    for i, item in enumerate(_responses_items(turn, rid)):
        if item["type"] == "message":
            ev("response.output_item.added", output_index=i,
               item={**item, "content": [], "status": "in_progress"})
            part = {"type": "output_text", "text": "", "annotations": []}
            ev("response.content_part.added", item_id=item["id"], output_index=i,
               content_index=0, part=part)
            for word in item["content"][0]["text"].split(" "):
                ev("response.output_text.delta", item_id=item["id"], output_index=i,
                   content_index=0, delta=word + " ")
            ev("response.output_text.done", item_id=item["id"], output_index=i,
               content_index=0, text=item["content"][0]["text"])
            ev("response.content_part.done", item_id=item["id"], output_index=i,
               content_index=0, part=item["content"][0])
        else:
            ev("response.output_item.added", output_index=i,
               item={**item, "arguments": "", "status": "in_progress"})
            ev("response.function_call_arguments.delta", item_id=item["id"], output_index=i,
               delta=item["arguments"])
            ev("response.function_call_arguments.done", item_id=item["id"], output_index=i,
               arguments=item["arguments"])
        ev("response.output_item.done", output_index=i, item=item)
    ev("response.completed", response=responses_body(turn, rid))
    return out


# ------------------------------------------------------------------------ Anthropic Messages


def _anthropic_blocks(turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.text is not None:
        blocks.append({"type": "text", "text": turn.text})
    blocks += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
               for c in turn.tool_calls]
    return blocks


def anthropic_message(turn: Turn, rid: int) -> dict[str, Any]:
    body: dict[str, Any] = {"id": f"msg_{rid}", "type": "message", "role": "assistant",
                            "model": turn.model, "content": _anthropic_blocks(turn),
                            "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
                            "stop_sequence": None}
    if turn.usage is not None:
        body["usage"] = turn.usage
    return body


def anthropic_events(turn: Turn, rid: int) -> list[tuple[str, dict[str, Any]]]:
    message = {**anthropic_message(turn, rid), "content": [], "stop_reason": None}
    message.pop("usage", None)
    if turn.start_usage is not None:
        message["usage"] = turn.start_usage
    out: list[tuple[str, dict[str, Any]]] = [("message_start",
                                              {"type": "message_start", "message": message}),
                                             ("ping", {"type": "ping"})]
    for i, block in enumerate(_anthropic_blocks(turn)):
        if block["type"] == "text":
            out.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": {"type": "text", "text": ""}}))
            out.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                "delta": {"type": "text_delta",
                                                          "text": block["text"]}}))
        else:
            out.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": {**block, "input": {}}}))
            out.append(("content_block_delta", {
                "type": "content_block_delta", "index": i,
                "delta": {"type": "input_json_delta",
                          "partial_json": json.dumps(block["input"])}}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta: dict[str, Any] = {"type": "message_delta",
                             "delta": {"stop_reason": "tool_use" if turn.tool_calls
                                       else "end_turn", "stop_sequence": None}}
    if turn.usage is not None:
        delta["usage"] = turn.usage
    out.append(("message_delta", delta))
    out.append(("message_stop", {"type": "message_stop"}))
    return out

