"""Anthropic Messages at the gateway (``POST /v1/messages``, plain and SSE, and
``POST /v1/messages/count_tokens``): Claude Code speaks it.

Usage fields do not overlap as OpenAI's do: ``input_tokens`` (uncached input),
``cache_read_input_tokens`` and ``cache_creation_input_tokens`` are three separate counts, and
thinking is inside ``output_tokens``; each is kept as reported (``Usage.cached_in_input`` False)
and priced once (``prices.call_cost``). In a stream, ``message_start`` carries the input side
and a first ``output_tokens``; ``message_delta`` carries the final, cumulative ``output_tokens``
(and, from newer servers, cumulative input fields, which then win). A stream cut before its
``message_delta`` has an unknown output, so its usage is incomplete and flagged, never guessed
from the ``message_start`` figure.

``count_tokens`` is forwarded and recorded but is not a model call that costs: its row has no
usage and a cost of 0.
"""

from __future__ import annotations

from typing import Any

from assay.models.gateway.wire import (
    EventMeter,
    Family,
    Outcome,
    PassMeter,
    Prepared,
    as_int,
    as_str,
    pin_model,
)
from assay.models.prices import Usage

_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
           "output_tokens")


def anthropic_usage(usage: Any) -> Usage | None:
    """Anthropic usage, field by field; None when there is no usage object at all."""
    if not isinstance(usage, dict):
        return None
    return Usage(input=as_int(usage.get("input_tokens")),
                 cached_input=as_int(usage.get("cache_read_input_tokens")),
                 output=as_int(usage.get("output_tokens")),
                 cache_write=as_int(usage.get("cache_creation_input_tokens")),
                 cached_in_input=False)


class AnthropicMessages:
    """``POST /v1/messages``."""

    name = "messages"
    family: Family = "anthropic"
    upstream_path = "/messages"
    metered = True
    # Claude Code calls /v1/messages?beta=true
    query: frozenset[str] = frozenset({"beta"})

    def prepare(self, raw: bytes, model: str, *, stream_usage: bool) -> Prepared:
        body, parsed, asked = pin_model(raw, model)
        stream = isinstance(parsed, dict) and parsed.get("stream") is True
        return Prepared(body, stream, asked)

    def read_answer(self, payload: Any) -> Outcome:
        if not isinstance(payload, dict):
            return Outcome()
        return Outcome(usage=anthropic_usage(payload.get("usage")),
                       model_served=as_str(payload.get("model")),
                       finish_reason=as_str(payload.get("stop_reason")),
                       step=payload.get("type") == "message")

    def meter(self, prepared: Prepared) -> AnthropicStreamMeter:
        return AnthropicStreamMeter()


class AnthropicStreamMeter(EventMeter):
    """Merges ``message_start`` and ``message_delta`` usage; done at ``message_stop`` (or an
    ``error`` event)."""

    def __init__(self) -> None:
        super().__init__()
        self._start: dict[str, Any] = {}
        self._delta: dict[str, Any] | None = None
        self._model: str | None = None
        self._stop: str | None = None
        self._step = False
        self._error = False

    def read(self, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        if kind == "message_start" and isinstance(payload.get("message"), dict):
            message = payload["message"]
            self._model = as_str(message.get("model")) or self._model
            if isinstance(message.get("usage"), dict):
                self._start = {k: v for k, v in message["usage"].items() if k in _FIELDS}
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict) and as_str(delta.get("stop_reason")):
                self._stop = as_str(delta["stop_reason"])
            if isinstance(payload.get("usage"), dict):
                # only the usage fields: a stream may carry any number of events, each with
                # keys of its own, and nothing else of them is ever read
                fields = {k: v for k, v in payload["usage"].items() if k in _FIELDS}
                self._delta = {**(self._delta or {}), **fields}
        elif kind == "message_stop":
            self._step = True
            self.done = True
        elif kind == "error":
            self._error = True
            self.done = True

    def outcome(self) -> Outcome:
        if not self._start and self._delta is None:
            usage = None
        else:
            merged = {k: v for k, v in self._start.items() if k in _FIELDS}
            merged.pop("output_tokens", None)  # the start's figure is not the answer's output
            merged.update({k: v for k, v in (self._delta or {}).items() if k in _FIELDS})
            usage = anthropic_usage(merged)
        return Outcome(usage=usage, model_served=self._model,
                       finish_reason="error" if self._error and not self._stop else self._stop,
                       step=self._step)


class AnthropicCountTokens:
    """``POST /v1/messages/count_tokens``: forwarded, recorded, never billed."""

    name = "messages.count_tokens"
    family: Family = "anthropic"
    upstream_path = "/messages/count_tokens"
    metered = False
    query: frozenset[str] = frozenset({"beta"})

    def prepare(self, raw: bytes, model: str, *, stream_usage: bool) -> Prepared:
        body, _, asked = pin_model(raw, model)
        return Prepared(body, False, asked)

    def read_answer(self, payload: Any) -> Outcome:
        return Outcome()

    def meter(self, prepared: Prepared) -> PassMeter:
        return PassMeter()
