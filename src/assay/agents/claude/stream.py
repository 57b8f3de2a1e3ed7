"""Reading Claude Code's ``--output-format stream-json --verbose`` stdout.

Pure functions over the bytes the CLI wrote, so a stream kept on disk reads the same later. The
stream is JSONL: a ``system`` line (subtype ``init``: session id, model, tools, CLI version;
subtype ``api_retry`` when a model call is retried), ``assistant`` lines (one Anthropic message
each: ``text``, ``thinking`` and ``tool_use`` blocks), ``user`` lines (``tool_result`` blocks)
and one final ``result`` line (``subtype`` ``success`` / ``error_max_turns`` /
``error_during_execution`` / ``error_max_budget_usd``, ``is_error``, ``num_turns``,
``total_cost_usd``, ``usage``). Nothing is repaired: each way the stream departs from that
shape is named (``ANOMALIES``) and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from assay.agents.cli_common import not_comparable, note_anomaly, parse_jsonl

KNOWN_TYPES = ("system", "assistant", "user", "result", "stream_event", "rate_limit_event")

#: every anomaly the reader (and the adapter's reconcile) can name, with what it means
ANOMALIES = {
    "invalid_json_line": "a line before the last is not a JSON object",
    "truncated_last_line": "the last line has no newline or does not parse (the writer died)",
    "unknown_message_type": "a line whose type the stream-json format does not name",
    "missing_init": "no system/init line: the CLI stopped before its session started",
    "missing_result": "no result line: a crash, a kill or a timeout; the exit code decides",
    "duplicate_result": "more than one result line",
    "result_not_last": "lines follow the result line",
    "session_id_inconsistent": "session_id changed within the run",
    "tool_result_without_call": "a tool_result names a tool_use id the stream never showed",
    "usage_disagrees_with_gateway": "the agent's usage claim disagrees with the gateway ledger",
}


@dataclass
class ClaudeStream:
    """What the stream says, and every way it departed from the format."""

    lines: int = 0
    anomalies: dict[str, int] = field(default_factory=dict)
    #: the first few concrete problems, for a reader (line numbers are 1-based)
    notes: list[str] = field(default_factory=list)
    type_counts: dict[str, int] = field(default_factory=dict)
    init: dict[str, Any] | None = None
    session_id: str | None = None
    assistant_messages: int = 0
    #: tool calls in order: id, name, and whether its result came back as an error
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    api_retries: list[dict[str, Any]] = field(default_factory=list)
    #: assistant text blocks that are the CLI's own API error report (``API Error: ...``)
    api_errors: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None

    def flag(self, name: str, note: str) -> None:
        note_anomaly(self.anomalies, self.notes, ANOMALIES, name, note)

    def to_record(self) -> dict[str, Any]:
        init = self.init or {}
        return {"lines": self.lines, "type_counts": self.type_counts,
                "session_id": self.session_id,
                "init": {"model": init.get("model"), "cli_version":
                         init.get("claude_code_version"), "tools": init.get("tools"),
                         "permission_mode": init.get("permissionMode"),
                         "api_key_source": init.get("apiKeySource")} if self.init else None,
                "assistant_messages": self.assistant_messages,
                "tool_calls": self.tool_calls, "api_retries": self.api_retries[:20],
                "api_errors": [e[:500] for e in self.api_errors[:5]],
                "anomaly_notes": self.notes}


def _content(msg: dict[str, Any]) -> list[dict[str, Any]]:
    inner = msg.get("message")
    blocks = inner.get("content") if isinstance(inner, dict) else None
    return [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []


def read_stream(raw: bytes) -> ClaudeStream:
    """Read one run's stdout; see the module docstring."""
    reading = ClaudeStream()
    events = parse_jsonl(raw, reading)
    calls: dict[str, dict[str, Any]] = {}
    for pos, (n, ev) in enumerate(events):
        kind = ev.get("type")
        if not isinstance(kind, str) or kind not in KNOWN_TYPES:
            reading.flag("unknown_message_type", f"line {n}: type {kind!r}")
            continue
        reading.type_counts[kind] = reading.type_counts.get(kind, 0) + 1
        sid = ev.get("session_id")
        if isinstance(sid, str):
            if reading.session_id is None:
                reading.session_id = sid
            elif sid != reading.session_id:
                reading.flag("session_id_inconsistent", f"line {n}: session_id {sid!r}")
        if kind == "system":
            if ev.get("subtype") == "init" and reading.init is None:
                reading.init = ev
            elif ev.get("subtype") == "api_retry":
                reading.api_retries.append({k: ev.get(k) for k in (
                    "attempt", "max_retries", "retry_delay_ms", "error_status", "error")})
        elif kind == "assistant":
            reading.assistant_messages += 1
            for block in _content(ev):
                if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    call = {"id": block["id"], "name": block.get("name"), "is_error": None}
                    calls[block["id"]] = call
                    reading.tool_calls.append(call)
                elif block.get("type") == "text" and str(block.get("text", "")).startswith(
                        "API Error"):
                    reading.api_errors.append(str(block["text"]))
        elif kind == "user":
            for block in _content(ev):
                if block.get("type") != "tool_result":
                    continue
                called = calls.get(str(block.get("tool_use_id")))
                if called is None:
                    reading.flag("tool_result_without_call",
                                 f"line {n}: tool_result for {block.get('tool_use_id')!r}")
                else:
                    called["is_error"] = bool(block.get("is_error"))
        elif kind == "result":
            if reading.result is not None:
                reading.flag("duplicate_result", f"line {n}: a second result line")
            else:
                reading.result = ev
                if pos + 1 < len(events):
                    reading.flag("result_not_last", f"line {n}: lines follow the result")
    if reading.init is None:
        reading.flag("missing_init", "no system/init line")
    if reading.result is None:
        reading.flag("missing_result", "no result line")
    return reading


def usage_check(claim: dict[str, Any] | None, gateway: dict[str, Any] | None) -> dict[str, Any]:
    """The result line's ``usage`` against the gateway's ledger for the same attempt.

    Claude Code sums the usage of the responses it kept; Anthropic reports cache reads and
    cache writes beside ``input_tokens``, so the claim's input is compared both with and without
    them. Calls the CLI made that it does not count (a retried call that failed, a side call)
    make its claim a lower bound: it disagrees only by claiming more than the gateway saw."""
    if (unknown := not_comparable(claim, gateway)) is not None:
        return unknown
    assert claim is not None and gateway is not None  # not_comparable said so
    cin, cout = claim.get("input_tokens"), claim.get("output_tokens")
    if not isinstance(cin, int | float) or not isinstance(cout, int | float):
        return {"comparable": False, "reason": "the claim has no input/output tokens"}
    cache = (claim.get("cache_read_input_tokens") or 0) + (
        claim.get("cache_creation_input_tokens") or 0)
    gin, gout = gateway.get("input") or 0, gateway.get("output") or 0
    agrees = cin <= gin and cout <= gout
    return {"comparable": True, "agrees": bool(agrees), "lower_bound": True,
            "exact": cin in (gin, gin - cache) and cout == gout,
            "agent": {"input": cin, "cache": cache, "output": cout},
            "gateway": {"input": gin, "cached_input": gateway.get("cached_input"),
                        "output": gout, "calls": gateway.get("calls")}}


__all__ = ["ANOMALIES", "ClaudeStream", "read_stream", "usage_check"]
