"""The OpenAI Responses API at the gateway (``POST /v1/responses``, plain and SSE): Codex speaks
nothing else.

Usage sits in the answer's ``usage`` (plain) or in the ``response`` of the terminal
``response.completed`` / ``response.incomplete`` event (SSE), always, so nothing has to be
asked for: ``input_tokens`` (cached ones included, ``input_tokens_details.cached_tokens``) and
``output_tokens`` (reasoning included, ``output_tokens_details.reasoning_tokens``), the same
overlap as chat completions. The API has no ``finish_reason``: the ledger keeps the response's
``status``, or the reason it is incomplete (``max_output_tokens``), as its finish reason.
"""

from __future__ import annotations

from typing import Any

from assay.models.gateway.wire import (
    EventMeter,
    Family,
    Outcome,
    Prepared,
    as_int,
    as_str,
    pin_model,
)
from assay.models.prices import Usage

#: Terminal stream events; the first two close a response the model answered.
_ANSWERED = ("response.completed", "response.incomplete")
_TERMINAL = (*_ANSWERED, "response.failed", "error")


def responses_usage(usage: Any) -> Usage | None:
    """Responses API usage, field by field; None when there is no usage object at all."""
    if not isinstance(usage, dict):
        return None
    in_details = usage.get("input_tokens_details")
    out_details = usage.get("output_tokens_details")
    return Usage(
        input=as_int(usage.get("input_tokens")),
        cached_input=as_int(in_details.get("cached_tokens"))
        if isinstance(in_details, dict) else None,
        output=as_int(usage.get("output_tokens")),
        reasoning=as_int(out_details.get("reasoning_tokens"))
        if isinstance(out_details, dict) else None,
    )


def _finish(response: dict[str, Any]) -> str | None:
    status = as_str(response.get("status"))
    details = response.get("incomplete_details")
    if status == "incomplete" and isinstance(details, dict) and as_str(details.get("reason")):
        return as_str(details["reason"])
    return status


class ResponsesAPI:
    """``POST /v1/responses``."""

    name = "responses"
    family: Family = "responses"
    upstream_path = "/responses"
    metered = True
    query: frozenset[str] = frozenset()

    def prepare(self, raw: bytes, model: str, *, stream_usage: bool) -> Prepared:
        body, parsed, asked = pin_model(raw, model)
        stream = isinstance(parsed, dict) and parsed.get("stream") is True
        return Prepared(body, stream, asked)

    def read_answer(self, payload: Any) -> Outcome:
        if not isinstance(payload, dict):
            return Outcome()
        status = payload.get("status")
        answered = status in ("completed", "incomplete") or (
            status is None and isinstance(payload.get("output"), list))
        return Outcome(usage=responses_usage(payload.get("usage")),
                       model_served=as_str(payload.get("model")),
                       finish_reason=_finish(payload), step=answered)

    def meter(self, prepared: Prepared) -> ResponsesStreamMeter:
        return ResponsesStreamMeter()


class ResponsesStreamMeter(EventMeter):
    """Reads model and usage from the ``response`` objects the events carry; done at the
    terminal event. A stream cut before it leaves the usage unknown."""

    def __init__(self) -> None:
        super().__init__()
        self._outcome = Outcome()

    def read(self, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        response = payload.get("response")
        if isinstance(response, dict):
            self._outcome.model_served = (as_str(response.get("model"))
                                          or self._outcome.model_served)
        if kind not in _TERMINAL:
            return
        self.done = True
        if isinstance(response, dict):
            self._outcome.usage = responses_usage(response.get("usage"))
            self._outcome.finish_reason = _finish(response)
        else:
            self._outcome.finish_reason = "error"
        self._outcome.step = kind in _ANSWERED

    def outcome(self) -> Outcome:
        return self._outcome
