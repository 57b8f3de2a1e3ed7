"""What every metered model API has in common at the gateway: the shapes of a prepared request
and of what an answer said, an SSE event splitter, and the two error bodies agents understand.

Kept apart from the protocols themselves so that each protocol is one small module reading its
own fields (``gateway_protocols`` for chat completions and the route table,
``gateway_responses``, ``gateway_anthropic``) and none of them imports another.

Error bodies: an agent reads an error in the shape of the API it speaks, and several agents
retry a 5xx for minutes (``shared/ref/agent-clis.md``), so a gateway that means "stop" answers
a 4xx in that shape: OpenAI ``{"error": {"message", "type", "param", "code"}}``, Anthropic
``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from assay.models.prices import MAX_COUNT, Usage
from assay.models.untrusted_json import parse_json

#: The API an arm's agent speaks to the gateway, and the gateway to the arm's upstream.
Family = Literal["chat", "responses", "anthropic"]
FAMILIES: tuple[Family, ...] = ("chat", "responses", "anthropic")
#: Which error body a client understands.
ErrorShape = Literal["openai", "anthropic"]


@dataclass
class Outcome:
    """What one answer said about metering."""

    usage: Usage | None = None
    model_served: str | None = None
    finish_reason: str | None = None
    # A completed assistant response (counts against assistant_steps).
    step: bool = False


@dataclass
class Prepared:
    """The request as it goes upstream, and what the agent asked for."""

    body: bytes
    stream: bool
    model_asked: str | None
    # The gateway asked for streamed usage the agent did not ask for, so the usage-only
    # event is kept from the agent (some agents index choices[0] of every chunk).
    hide_usage_event: bool = False


class StreamMeter(Protocol):
    """Reads an SSE stream as it passes; ``feed`` returns the bytes to hand on now. ``done``
    turns True on the protocol's terminal event, before it is handed on, so the gateway settles
    the ledger row (and the budget) before the agent sees the end of the answer."""

    done: bool

    def feed(self, chunk: bytes) -> bytes: ...

    def pending(self) -> int:
        """Bytes held back waiting for the end of an event (bounded by the gateway)."""
        ...

    def flush(self) -> bytes: ...

    def outcome(self) -> Outcome: ...


class WireProtocol(Protocol):
    """One route of a model API."""

    # the ledger's ``endpoint``
    name: str
    # the arm protocol this route belongs to; a call of another family is refused
    family: Family
    # appended to the upstream's base URL (which ends in /v1)
    upstream_path: str
    # a model call that may cost (False: e.g. count_tokens, recorded but never billed)
    metered: bool
    # the query parameters the API defines for this route (any other is refused with a 400)
    query: frozenset[str]

    def prepare(self, raw: bytes, model: str, *, stream_usage: bool) -> Prepared: ...

    def read_answer(self, payload: Any) -> Outcome: ...

    def meter(self, prepared: Prepared) -> StreamMeter: ...


def as_int(value: Any) -> int | None:
    """A reported count, or None when it is absent or not a count (negative, a boolean, not an
    integer, or over ``prices.MAX_COUNT``: its cost would overflow a float, an OverflowError
    that ended the call without its ledger row; the row says ``usage_missing`` instead)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


#: The longest name (a model, a finish reason, a status) a ledger row keeps as sent. Every row
#: is small figures; a model name of megabytes, from an upstream's answer or an agent's request,
#: would otherwise be written into the row of every call.
MAX_NAME = 256


def as_str(value: Any) -> str | None:
    """A reported name: the string, cut to ``MAX_NAME`` characters and marked with its full
    length when longer (so two long names still differ where they differ); None when it is
    not a string."""
    if not isinstance(value, str):
        return None
    return value if len(value) <= MAX_NAME else f"{value[:MAX_NAME]}… ({len(value)} chars)"


def pin_model(raw: bytes, model: str) -> tuple[bytes, dict[str, Any] | None, str | None]:
    """The body with ``model`` set to the arm's model (an agent cannot switch it), the parsed
    body, and the model the agent asked for. A body that is not a JSON object is sent as it
    came: the upstream answers it with its own 400."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        return raw, None, None
    asked = body.get("model")
    if asked == model:
        return raw, body, model
    body["model"] = model
    return json.dumps(body, ensure_ascii=False).encode(), body, as_str(asked)


def event_end(buf: bytes, start: int) -> tuple[int, int]:
    """(index where the next event ends, length of its blank-line separator), or (-1, 0).
    A CRLF separator that comes first ends by ``lf + 4``, so only that far is searched for one:
    searching the whole buffer for each event would make a chunk of many small events
    quadratic in its size."""
    lf = buf.find(b"\n\n", start)
    crlf = buf.find(b"\r\n\r\n", start, lf + 4 if lf >= 0 else len(buf))
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, 4
    return (lf, 2) if lf >= 0 else (-1, 0)


def whole_events(buf: bytes) -> tuple[list[tuple[int, int, int]], int]:
    """The whole events in ``buf`` as ``(start, end, next)`` (the event is ``buf[start:end]``,
    its separator runs to ``next``), and where the unfinished rest begins."""
    spans: list[tuple[int, int, int]] = []
    start = 0
    while True:
        end, sep = event_end(buf, start)
        if end < 0:
            return spans, start
        spans.append((start, end, end + sep))
        start = end + sep


class EventBuffer:
    """The whole SSE events of a stream that arrives in pieces, the unfinished rest kept.

    A piece in which no event ends is only kept (an end split between two pieces is found
    from the last 3 bytes kept before it); the pieces are joined once, when an event ends. So
    an event that arrives in many small pieces costs time linear in its size: joining and
    rescanning the whole rest at every piece, as a plain ``rest + piece`` does, made an event
    of a few MiB sent a TCP segment at a time cost minutes of the gateway's one thread.
    ``size`` is what is kept; its bound is the caller's (``MAX_EVENT``)."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._tail = b""
        self.size = 0

    def feed(self, piece: bytes) -> tuple[bytes, list[tuple[int, int, int]]]:
        """A buffer and the events now whole in it (``whole_events`` spans, the first at 0,
        the last ending where the kept rest begins)."""
        if self._pieces:
            probe = self._tail + piece
            if b"\n\n" not in probe and b"\r\n\r\n" not in probe:
                self._keep(piece, probe[-3:])
                return b"", []
            buf = b"".join([*self._pieces, piece])
        else:
            buf = piece
        spans, rest = whole_events(buf)
        self._pieces, self._tail, self.size = [], b"", 0
        if rest < len(buf):
            self._keep(buf[rest:], buf[max(rest, len(buf) - 3):])
        return buf, spans

    def _keep(self, piece: bytes, tail: bytes) -> None:
        self._pieces.append(piece)
        self._tail = tail
        self.size += len(piece)

    def flush(self) -> bytes:
        """What is kept (an event the stream never ended), and nothing kept after."""
        rest = b"".join(self._pieces)
        self._pieces, self._tail, self.size = [], b"", 0
        return rest


class EventMeter:
    """An SSE meter that hands every event on unchanged and gives each one's JSON ``data`` to
    ``read`` (it must see whole events to read them, so a partial event waits for its end)."""

    def __init__(self) -> None:
        self.done = False
        self._events = EventBuffer()

    def feed(self, chunk: bytes) -> bytes:
        buf, spans = self._events.feed(chunk)
        for begin, end, _ in spans:
            self._event(buf[begin:end])
        return buf[:spans[-1][2]] if spans else b""

    def pending(self) -> int:
        return self._events.size

    def flush(self) -> bytes:
        rest = self._events.flush()
        if rest.strip():
            self._event(rest)
        return rest

    def _event(self, event: bytes) -> None:
        data = [line[5:].strip() for line in event.replace(b"\r\n", b"\n").split(b"\n")
                if line.startswith(b"data:")]
        if not data:
            return
        payload = parse_json(b"\n".join(data))
        if isinstance(payload, dict):
            self.read(payload)

    def read(self, payload: dict[str, Any]) -> None:
        raise NotImplementedError

    def outcome(self) -> Outcome:
        raise NotImplementedError


class PassMeter(EventMeter):
    """For a route that is never streamed: passes bytes, reads nothing."""

    def read(self, payload: dict[str, Any]) -> None:
        pass

    def outcome(self) -> Outcome:
        return Outcome()


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error",
                    413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}


def error_shape(path: str) -> ErrorShape:
    """The error body a client calling ``path`` reads."""
    return "anthropic" if path == "/v1/messages" or path.startswith("/v1/messages/") else "openai"


def error_body(shape: ErrorShape, status: int, message: str, kind: str,
               code: str | None = None) -> bytes:
    """An error answer in the client's own shape. Anthropic's ``error.type`` follows the
    status, as its SDKs expect; OpenAI's keeps the gateway's ``type`` and ``code``."""
    if shape == "anthropic":
        atype = _ANTHROPIC_TYPES.get(status, "api_error")
        return json.dumps({"type": "error", "error": {"type": atype, "message": message}}).encode()
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return json.dumps(body).encode()
