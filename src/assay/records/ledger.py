"""The model gateway's records: one row per model call of an attempt (``model_calls.jsonl``), and
the gateway's own log of calls it could not tie to a running attempt.

The ledger is the evidence behind every token and dollar an experiment reports, so a row keeps
usage exactly as the upstream reported it, field by field (input, cached input, output,
reasoning overlap: cached tokens are part of the input, reasoning tokens part of the output,
and nothing here adds them up), and says when the upstream reported none instead of writing a
zero. A row never holds the real key, the scoped token, or the request body (only its digest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from assay.records.base import Record
from assay.records.io import iter_rows

#: The per-attempt limits a gateway enforces, by the name the records and the runner use.
LimitName = Literal["tokens", "cost_usd", "assistant_steps"]


class ModelCall(Record):
    """One call an agent made through the gateway, appended as soon as it completed."""

    schema_name = "assay.model_call"
    schema_version = 1
    file = "model_calls.jsonl"

    time: str
    """When the gateway received the request, ISO 8601 UTC."""
    latency_ms: float
    """From the request fully received to the answer complete at the gateway, its last bytes
    about to go to the agent (the row is written then, before the agent can call again)."""
    attempt_id: str
    """The attempt whose scoped token made the call."""
    seq: int
    """1-based number of the call within its attempt, in order of arrival."""
    endpoint: str
    """What was asked: ``chat.completions``, ``models``, or the path when no route matched."""
    status: int
    """HTTP status the agent received from the gateway."""
    upstream_status: int | None
    """HTTP status the upstream answered with; null when the upstream was not asked (budget
    refusal, unknown route) or gave no answer at all."""
    forwarded: bool
    """Whether the call was sent upstream; a refused call costs nothing and is not usage."""
    stream: bool
    """Whether the agent asked for a streamed (SSE) answer."""
    model_asked: str | None
    """The ``model`` field of the agent's request, as sent."""
    model_upstream: str | None
    """The model the gateway asked the upstream for (the attempt's pinned model); null for
    calls that name no model (``models``, unknown routes)."""
    model_served: str | None
    """The ``model`` the upstream said it served, when it said one."""
    request_sha256: str
    """SHA-256 of the request body exactly as the agent sent it (before the gateway pinned the
    model or asked for streamed usage)."""
    request_bytes: int
    """Size of that body."""
    input_tokens: int | None
    """Input tokens as reported (OpenAI ``usage.prompt_tokens``, cached ones included)."""
    cached_input_tokens: int | None
    """Of the input, how many were served from the provider's cache, as reported
    (``usage.prompt_tokens_details.cached_tokens``); null when not reported."""
    output_tokens: int | None
    """Output tokens as reported (``usage.completion_tokens``, reasoning ones included)."""
    reasoning_tokens: int | None
    """Of the output, how many were reasoning, as reported
    (``usage.completion_tokens_details.reasoning_tokens``); null when not reported."""
    usage_missing: bool
    """The upstream was asked but reported no usage (or the answer was cut short): this call's
    tokens and cost are unknown, and every total that includes it is a lower bound."""
    cost_usd: float | None
    """Cost from the pinned price table; null when unknown (usage missing, or the model has no
    price). 0 only for calls that cost nothing: refused by the gateway, not metered
    (``models``), never reaching a provider, or answered with an HTTP error (not billed)."""
    assistant_step: bool
    """Whether this call completed an assistant response (counted against
    ``assistant_steps``)."""
    finish_reason: str | None
    """``finish_reason`` of the first choice, when the answer had one."""
    exhausted: LimitName | None
    """The attempt limit that refused this call, or that this call reached."""
    upstream_unreachable: bool
    """The upstream could not be reached at all (no connection): an infrastructure failure,
    not the agent's."""
    error: str | None
    """What went wrong, readable, when something did; never holds a key or token."""


class GatewayEvent(Record):
    """A call the gateway refused before it belonged to a running attempt (no, unknown or
    revoked token), kept in the gateway's own log since no attempt ledger may take it."""

    schema_name = "assay.gateway_event"
    schema_version = 1
    file = "gateway_events.jsonl"

    time: str
    """When it happened, ISO 8601 UTC."""
    kind: Literal["unauthorized"]
    """What the gateway did: ``unauthorized`` is a 401 answer."""
    reason: Literal["no_token", "unknown_token", "revoked_token"]
    """Why: the request had no token, one the gateway never issued, or the token of an attempt
    already closed."""
    attempt_id: str | None
    """The attempt a revoked token belonged to; null for an unknown token."""
    method: str
    """HTTP method of the refused request."""
    path: str
    """Request path, without its query string."""
    status: int
    """HTTP status answered."""


def ledger_totals(path: Path) -> dict[str, Any]:
    """What one attempt's ``model_calls.jsonl`` adds up to, read back from disk (a report, or a
    resumed run's budget, needs it without the gateway that wrote it): calls, tokens as reported,
    cost, and how many calls had no usage or no price (then the cost is a lower bound). Calls the
    gateway refused were never forwarded and spent nothing."""
    out: dict[str, Any] = {"calls": 0, "input": 0, "cached_input": 0, "output": 0,
                           "reasoning": 0, "cost_usd": 0.0, "usage_missing_calls": 0,
                           "unpriced_calls": 0}
    if not path.is_file():
        return out
    for row in iter_rows(path):
        out["calls"] += 1
        if not row.get("forwarded", True):
            continue
        if row.get("usage_missing"):
            out["usage_missing_calls"] += 1
        for k in ("input", "cached_input", "output", "reasoning"):
            out[k] += int(row.get(f"{k}_tokens") or 0)
        if row.get("cost_usd") is None:
            out["unpriced_calls"] += 1
        else:
            out["cost_usd"] += float(row["cost_usd"])
    return out
