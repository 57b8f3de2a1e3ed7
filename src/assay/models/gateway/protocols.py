"""What the gateway knows about each model API it meters: the one place a protocol lives.

The gateway itself only authenticates, budgets, forwards bytes and writes the ledger; the
questions that differ per API (which path, how to pin the model and ask for streamed usage,
where usage sits in an answer and in a stream, what counts as a completed assistant response)
are answered by a ``WireProtocol``: chat completions here, the Responses API in
``gateway_responses``, Anthropic Messages in ``gateway_anthropic``, shared shapes in
``gateway_wire``. ``ROUTES`` is the one table from (method, path) to protocol.
"""

from __future__ import annotations

import json
from typing import Any

from assay.models.gateway.anthropic import AnthropicCountTokens, AnthropicMessages
from assay.models.gateway.responses import ResponsesAPI
from assay.models.gateway.wire import (
    FAMILIES,
    EventBuffer,
    Family,
    Outcome,
    Prepared,
    StreamMeter,
    WireProtocol,
    as_str,
)
from assay.models.gateway.wire import as_int as _int
from assay.models.prices import Usage
from assay.models.untrusted_json import parse_json

__all__ = ["FAMILIES", "FORWARDED_HEADERS", "MODELS_QUERY", "ROUTES", "ChatCompletions",
           "ChatStreamMeter", "Family", "Outcome", "Prepared", "StreamMeter", "WireProtocol",
           "chat_usage", "family_paths"]


def chat_usage(usage: Any) -> Usage | None:
    """OpenAI chat usage, field by field; None when there is no usage object at all."""
    if not isinstance(usage, dict):
        return None
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    return Usage(
        input=_int(usage.get("prompt_tokens")),
        cached_input=_int(prompt_details.get("cached_tokens"))
        if isinstance(prompt_details, dict) else None,
        output=_int(usage.get("completion_tokens")),
        reasoning=_int(completion_details.get("reasoning_tokens"))
        if isinstance(completion_details, dict) else None,
    )


class ChatCompletions:
    """``POST /v1/chat/completions``, plain and SSE."""

    name = "chat.completions"
    family: Family = "chat"
    upstream_path = "/chat/completions"
    metered = True
    query: frozenset[str] = frozenset()

    def prepare(self, raw: bytes, model: str, *, stream_usage: bool) -> Prepared:
        body = parse_json(raw)
        if not isinstance(body, dict):
            # Not ours to judge: the upstream answers a malformed request with its own 400.
            return Prepared(raw, False, None)
        asked = body.get("model")
        stream = body.get("stream") is True
        changed = False
        if asked != model:
            body["model"] = model  # the arm's model is pinned; an agent cannot switch it
            changed = True
        hide = False
        if stream and stream_usage:
            options = body.get("stream_options")
            if not isinstance(options, dict) or options.get("include_usage") is not True:
                hide = True
                body["stream_options"] = {**(options if isinstance(options, dict) else {}),
                                          "include_usage": True}
                changed = True
        out = json.dumps(body, ensure_ascii=False).encode() if changed else raw
        return Prepared(out, stream, as_str(asked), hide)

    def read_answer(self, payload: Any) -> Outcome:
        if not isinstance(payload, dict):
            return Outcome()
        choices = payload.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        finish = first.get("finish_reason") if isinstance(first, dict) else None
        model = payload.get("model")
        return Outcome(usage=chat_usage(payload.get("usage")),
                       model_served=as_str(model), finish_reason=as_str(finish),
                       step=isinstance(first, dict) and "message" in first)

    def meter(self, prepared: Prepared) -> StreamMeter:
        return ChatStreamMeter(hide_usage_event=prepared.hide_usage_event)


class ChatStreamMeter:
    """Splits the stream into SSE events (it must see whole events to read them), reads model,
    finish reason and usage from them, and hands every event on unchanged, except the usage-only
    event the gateway asked for on the agent's behalf."""

    def __init__(self, *, hide_usage_event: bool) -> None:
        self.hide = hide_usage_event
        self.done = False
        self._events = EventBuffer()
        self._usage: Usage | None = None
        self._model: str | None = None
        self._finish: str | None = None

    def feed(self, chunk: bytes) -> bytes:
        buf, spans = self._events.feed(chunk)
        out: list[bytes] = []
        for begin, end, after in spans:
            if self._read(buf[begin:end]):
                out.append(buf[begin:after])
        return b"".join(out)

    def pending(self) -> int:
        return self._events.size

    def flush(self) -> bytes:
        rest = self._events.flush()
        if rest.strip() and not self._read(rest):
            return b""
        return rest

    def outcome(self) -> Outcome:
        return Outcome(usage=self._usage, model_served=self._model,
                       finish_reason=self._finish, step=self._finish is not None)

    def _read(self, event: bytes) -> bool:
        """Take what the event says; False if it is to be kept from the agent."""
        data = [line[5:].strip() for line in event.replace(b"\r\n", b"\n").split(b"\n")
                if line.startswith(b"data:")]
        if not data:
            return True
        text = b"\n".join(data)
        if text == b"[DONE]":
            self.done = True
            return True
        payload = parse_json(text)
        if not isinstance(payload, dict):
            return True
        if self._model is None:
            self._model = as_str(payload.get("model"))
        choices = payload.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                    self._finish = self._finish or as_str(choice["finish_reason"])
        usage = chat_usage(payload.get("usage"))
        if usage is not None:
            self._usage = usage
            if self.hide and not choices:
                return False
        return True


#: The model routes: (method, path) -> protocol. ``/v1/models`` is forwarded unmetered by the
#: gateway itself, for every family.
ROUTES: dict[tuple[str, str], WireProtocol] = {
    ("POST", "/v1/chat/completions"): ChatCompletions(),
    ("POST", "/v1/responses"): ResponsesAPI(),
    ("POST", "/v1/messages"): AnthropicMessages(),
    ("POST", "/v1/messages/count_tokens"): AnthropicCountTokens(),
}


#: ``GET /v1/models``: forwarded unmetered for every family; the query parameters each
#: family's API defines for it (Anthropic pages the list).
MODELS_QUERY: dict[Family, frozenset[str]] = {
    "chat": frozenset(), "responses": frozenset(),
    "anthropic": frozenset({"limit", "before_id", "after_id"}),
}

#: The request headers of an agent that go upstream, per family: what the API needs to read
#: the body and its version. Everything else stays at the gateway: the agent's credentials
#: (the gateway sets the real key), hop-by-hop headers, cookies, SDK telemetry, account
#: selectors (``openai-organization``), ``accept-encoding`` (the body comes back uncompressed
#: so it can be metered).
_COMMON_HEADERS = frozenset({"content-type", "accept", "user-agent"})
FORWARDED_HEADERS: dict[Family, frozenset[str]] = {
    "chat": _COMMON_HEADERS | {"openai-beta"},
    "responses": _COMMON_HEADERS | {"openai-beta"},
    "anthropic": _COMMON_HEADERS | {"anthropic-version", "anthropic-beta"},
}


def family_paths(family: Family) -> list[str]:
    """The routes an attempt of ``family`` may call, for a refusal that says what to call."""
    return [f"{m} {p}" for (m, p), proto in ROUTES.items() if proto.family == family]
