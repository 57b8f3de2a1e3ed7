"""The model gateway's records: one row per model call of an attempt (``model_calls.jsonl``), and
the gateway's own log of calls it could not tie to a running attempt.

The ledger is the evidence behind every token and dollar an experiment reports, so a row keeps
usage exactly as the upstream reported it, field by field, and nothing here adds fields up. How
they overlap depends on the row's ``protocol``: for OpenAI's APIs (``chat``, ``responses``)
cached tokens are part of the input and reasoning tokens part of the output; for ``anthropic``
the input, the cache reads (``cached_input_tokens``) and the cache writes
(``cache_write_input_tokens``) are three separate counts. A row says when the upstream reported
no usage instead of writing a zero, and never holds the real key, the scoped token, or the
request body (only its digest).

Schema 2 added ``protocol`` and ``cache_write_input_tokens``; a schema-1 row (chat only, no
cache writes) reads with their defaults. Schema 3 added ``transcript`` (whether the call's bodies
were kept in the attempt's transcript, ``transcript.jsonl``; the bodies are typed in
``records/transcript.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from assay.records.base import Record
from assay.records.io import TORN_SUFFIX, iter_rows

#: The per-attempt limits a gateway enforces, by the name the records and the runner use.
LimitName = Literal["tokens", "cost_usd", "assistant_steps"]


class ModelCall(Record):
    """One call an agent made through the gateway, appended as soon as it completed. A last
    row cut short (the runner killed while writing it) is still a call: every total read
    back counts it with unknown usage and cost, so the cost is a lower bound with that
    reason, never a silent zero."""

    schema_name = "assay.model_call"
    schema_version = 4
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
    """What was asked: ``chat.completions``, ``responses``, ``messages``,
    ``messages.count_tokens``, ``models``, or the path when no route matched."""
    protocol: Literal["chat", "responses", "anthropic"] = "chat"
    """The API the attempt's agent and upstream speak (the arm's ``model.protocol``); it says
    how the usage fields below overlap. A call to another API's route is refused (400)."""
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
    """The ``model`` field of the agent's request, as sent (a name over 256 characters: its
    first 256, then ``… (<length> chars)``, as for every name in this row)."""
    model_upstream: str | None
    """The model the gateway asked the upstream for (the attempt's pinned model); null for
    calls that name no model (``models``, unknown routes)."""
    model_served: str | None
    """The ``model`` the upstream said it served, when it said one (cut as ``model_asked``)."""
    request_sha256: str
    """SHA-256 of the request body exactly as the agent sent it (before the gateway pinned the
    model or asked for streamed usage)."""
    request_bytes: int
    """Size of that body."""
    input_tokens: int | None
    """Input tokens as reported: chat ``usage.prompt_tokens`` and responses
    ``usage.input_tokens`` (cached ones included); anthropic ``usage.input_tokens`` (cache
    reads and writes *not* included)."""
    cached_input_tokens: int | None
    """Tokens served from the provider's cache, as reported: chat
    ``usage.prompt_tokens_details.cached_tokens``, responses
    ``usage.input_tokens_details.cached_tokens`` (both part of the input); anthropic
    ``usage.cache_read_input_tokens`` (apart from the input). Null when not reported."""
    cache_write_input_tokens: int | None = None
    """Anthropic ``usage.cache_creation_input_tokens``: tokens written to the prompt cache,
    apart from the input; null when not reported (always, for OpenAI's APIs)."""
    output_tokens: int | None
    """Output tokens as reported (chat ``usage.completion_tokens``, responses and anthropic
    ``usage.output_tokens``; reasoning or thinking tokens included)."""
    reasoning_tokens: int | None
    """Of the output, how many were reasoning, as reported (chat
    ``usage.completion_tokens_details.reasoning_tokens``, responses
    ``usage.output_tokens_details.reasoning_tokens``); null when not reported (anthropic does
    not report thinking apart)."""
    usage_missing: bool
    """The upstream was asked but reported no usage, or not both input and output (or the
    answer was cut short): this call's tokens and cost are unknown, and every total that
    includes it is a lower bound."""
    cost_usd: float | None
    """Cost from the pinned price table; null when unknown (usage missing, or the model has no
    price). 0 only for calls that cost nothing: refused by the gateway, not metered
    (``models``, ``messages.count_tokens``), never reaching a provider, or answered with an HTTP
    error (not billed). Priced as ``assay.models.prices`` documents, per protocol."""
    assistant_step: bool
    """Whether this call completed an assistant response (counted against
    ``assistant_steps``)."""
    finish_reason: str | None
    """Why the answer ended, when it said: chat ``finish_reason`` of the first choice;
    responses the response's ``status`` (or its ``incomplete_details.reason``); anthropic
    ``stop_reason`` (cut as ``model_asked``)."""
    exhausted: LimitName | None
    """The attempt limit that refused this call, or that this call reached."""
    upstream_unreachable: bool
    """The upstream could not be reached at all (no connection): an infrastructure failure,
    not the agent's."""
    error: str | None
    """What went wrong, readable, when something did; for an upstream error answer
    ``upstream HTTP <status>: `` and the first 512 bytes of its body. Never holds a key or
    token (the real key and anything credential-shaped are replaced by ``***``)."""
    transcript: Literal["kept", "off", "over_limit", "failed"] | None = None
    """What the attempt's transcript (``transcript.jsonl``) holds of this call's bodies:
    ``kept``; ``off`` when the experiment set ``transcripts: false`` (only this row's figures
    and digest exist); ``over_limit`` when the attempt had already stored its most transcript
    bytes; ``failed`` when writing it failed (a full disk). Null for a call that is not a model
    call (``models``, an unknown route) and in rows older than schema 3."""
    queued_ms: float | None = None
    """How long the call waited for its turn at the upstream (the attempt's
    ``limits.concurrent_requests``, or the upstream saturated and calls let through
    round-robin across attempts); null for a call never forwarded and in rows older than
    schema 4."""
    own_in_flight: int | None = None
    """This attempt's calls in flight to the upstream when this one went, itself included."""
    upstream_in_flight: int | None = None
    """Every attempt's calls in flight to the same upstream when this one went."""
    throttled_by: Literal["own", "others"] | None = None
    """For an upstream 429 (or 529, overloaded): whose traffic it is put down to. ``others``
    when other attempts had calls in flight to the upstream and this attempt held no more
    than its equal part of them (a 429 the other arm's burst caused, not this agent's doing);
    ``own`` otherwise. Null for any other answer."""


class GatewayEvent(Record):
    """A request the gateway refused before it became a call of a running attempt: no,
    unknown or revoked token (``unauthorized``), or a request it would not parse or hold
    (``refused``: malformed HTTP, a body or head over its limit, a client too slow to send
    its request, an attempt over its connection cap). Kept in the gateway's own log since no
    attempt ledger may take it; nothing of such a request reached the upstream.

    Schema 2 added ``refused`` and its reasons, ``detail``, and made ``method`` and ``path``
    nullable (a request may be refused before its request line is read). Schema 3 added the
    per-attempt channel's reasons (``head_cap``, ``gateway_share``, ``wrong_channel``,
    ``connection_rate``),
    ``limit``, ``figure`` and ``count``: a connection that came in on an attempt's own channel
    belongs to that attempt from its first byte, so its refusal names the attempt even when
    no head was read."""

    schema_name = "assay.gateway_event"
    schema_version = 3
    file = "gateway_events.jsonl"

    time: str
    """When it happened, ISO 8601 UTC."""
    kind: Literal["unauthorized", "refused"]
    """What the gateway did: ``unauthorized`` is a 401 answer; ``refused`` a 4xx answer to a
    request it would not take (the connection is closed after it)."""
    reason: Literal["no_token", "unknown_token", "revoked_token", "malformed",
                    "body_too_large", "head_too_large", "header_timeout", "body_timeout",
                    "connection_cap", "head_cap", "gateway_share", "wrong_channel",
                    "connection_rate", "gateway_busy"]
    """Why: the request had no token, one the gateway never issued, or the token of an attempt
    already closed (``unauthorized``); or it was not well-formed HTTP/1.1 (CR, LF or NUL in a
    header, folded lines, duplicated or conflicting ``Content-Length``, ``Transfer-Encoding``
    with ``Content-Length``, a bad chunk, ...: 400), its body or head was over the gateway's
    limit (413, 431), its head or body did not arrive in time (408), or its attempt already
    had the most connections it may hold open (429), or the most connections whose request
    head is still unfinished (``head_cap``, 429), or its fair share of the gateway-wide
    ceiling was what stopped it (``gateway_share``, 503: the comparison is not clean), or a
    request on one attempt's channel carried another attempt's token (``wrong_channel``, 401),
    or an attempt opened connections faster than its channel accepts them
    (``connection_rate``: the rest waited in the backlog, none was lost),
    or the gateway as a whole did (``gateway_busy``: the connection was closed unread; one
    event a second counts them)."""
    attempt_id: str | None
    """The attempt whose token the request carried, when it carried one the gateway issued
    (open or revoked) and got that far; null otherwise."""
    method: str | None
    """HTTP method of the refused request; null when it was refused before its head was read."""
    path: str | None
    """Request path, without its query string; null as for ``method``."""
    status: int
    """HTTP status answered."""
    detail: str | None = None
    """What was wrong, readable (never a key, a token or a header value)."""
    limit: int | None = None
    """The limit that refused it (connections, unfinished heads, the attempt's share of the
    ceiling); null for a refusal that is no count (malformed HTTP, a timeout)."""
    figure: int | None = None
    """What the attempt (or the gateway) held when it was refused, in the limit's unit; null
    as for ``limit``."""
    count: int = 1
    """How many refusals this event stands for: a flood is noted at most once a second per
    attempt and reason, with the number refused since the last note."""


#: Why a total that includes a torn ledger row is a lower bound (reports show it as is).
TORN_ROW_NOTE = ("the last row of a model_calls.jsonl was cut short (the runner was killed "
                 "while writing it): that call counts with unknown usage and cost")


def ledger_totals(path: Path) -> dict[str, Any]:
    """What one attempt's ``model_calls.jsonl`` adds up to, read back from disk (a report, or a
    resumed run's budget, needs it without the gateway that wrote it): calls, tokens as reported,
    cost, and how many calls had no usage or no price (then the cost is a lower bound). Calls the
    gateway refused were never forwarded and spent nothing.

    A last row cut in half (a kill while the gateway wrote it) is a call that happened and
    whose figures are lost: it counts as a call with missing usage and no price, and
    ``torn_rows`` says so, so the cost built on it is a lower bound with its reason
    (:data:`TORN_ROW_NOTE`), never a silent zero. So does each row a writer that reopened
    the ledger kept in ``model_calls.jsonl.torn.jsonl`` before cutting it off."""
    out: dict[str, Any] = {"calls": 0, "input": 0, "cached_input": 0, "cache_write_input": 0,
                           "output": 0, "reasoning": 0, "cost_usd": 0.0,
                           "usage_missing_calls": 0, "unpriced_calls": 0, "torn_rows": 0}
    if not path.is_file():
        return out

    def torn(_tail: bytes) -> None:
        out["calls"] += 1
        out["usage_missing_calls"] += 1
        out["unpriced_calls"] += 1
        out["torn_rows"] += 1

    side = path.with_name(path.name + TORN_SUFFIX)  # torn rows a reopened ledger cut off
    if side.is_file():
        for _ in iter_rows(side, on_torn=lambda _tail: None):
            torn(b"")
    for row in iter_rows(path, on_torn=torn):
        out["calls"] += 1
        if not row.get("forwarded", True):
            continue
        if row.get("usage_missing"):
            out["usage_missing_calls"] += 1
        for k in ("input", "cached_input", "cache_write_input", "output", "reasoning"):
            out[k] += int(row.get(f"{k}_tokens") or 0)
        if row.get("cost_usd") is None:
            out["unpriced_calls"] += 1
        else:
            out["cost_usd"] += float(row["cost_usd"])
    return out
