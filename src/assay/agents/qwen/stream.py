"""Reading qwen-code's ``-o stream-json`` output: JSONL of ``system``, ``assistant``, ``user``,
``stream_event`` messages ending in one ``result`` (``subtype`` ``success`` or
``error_during_execution``, ``is_error``, ``num_turns``, ``usage``).

Kept apart from the adapter because it is pure: bytes in, a summary out, so every way a
stream can break is testable without the CLI. A run that hits ``--max-session-turns`` (exit
53) or ``--max-wall-time`` (exit 55) writes no ``result`` at all; the adapter reads the exit
code for those, and the missing result is named here like any other break.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: every anomaly the reader can name (the execution record's ``anomalies`` keys)
ANOMALIES = ("unparseable_line", "truncated_last_line", "missing_result", "duplicate_result",
             "result_not_last", "session_id_inconsistent", "unknown_message_type")
KNOWN_TYPES = {"system", "assistant", "user", "stream_event", "result"}
#: the CLI's exit codes, from its own messages
EXIT_CODES = {0: "success", 1: "error", 53: "max session turns reached",
              55: "run budget exceeded (--max-wall-time / --max-tool-calls)"}


@dataclass
class QwenReading:
    """What one stream says: the final result (or None), counts, and every break by name."""

    result: dict[str, Any] | None = None
    init: dict[str, Any] | None = None
    assistant_messages: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)
    tool_errors: int = 0
    #: model calls that failed, as the CLI reported them (``[API Error: …]`` messages)
    api_errors: list[str] = field(default_factory=list)
    anomalies: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def flag(self, name: str, note: str) -> None:
        self.anomalies[name] = self.anomalies.get(name, 0) + 1
        if len(self.notes) < 20:
            self.notes.append(f"{name}: {note}")

    def to_record(self) -> dict[str, Any]:
        init = self.init or {}
        return {"assistant_messages": self.assistant_messages, "tool_calls": self.tool_calls,
                "tool_errors": self.tool_errors, "api_errors": self.api_errors[:10],
                "notes": self.notes,
                "session_id": init.get("session_id"), "model": init.get("model"),
                "cli_version": init.get("qwen_code_version"),
                "permission_mode": init.get("permission_mode")}


def read_stream(raw: bytes) -> QwenReading:
    """Every line parsed on its own; a bad line is named and skipped, never fatal."""
    reading = QwenReading()
    lines = raw.split(b"\n")
    truncated = bool(lines) and lines[-1].strip() != b""
    sessions: set[str] = set()
    after_result = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            if not isinstance(msg, dict):
                raise ValueError("not an object")
        except ValueError:
            last = i == len(lines) - 1
            reading.flag("truncated_last_line" if last and truncated else "unparseable_line",
                         f"line {i + 1}")
            continue
        if reading.result is not None:
            after_result += 1
        if isinstance(msg.get("session_id"), str):
            sessions.add(msg["session_id"])
        _take(reading, msg)
    if reading.result is None:
        reading.flag("missing_result", "no result message")
    elif after_result and "duplicate_result" not in reading.anomalies:
        reading.flag("result_not_last", f"{after_result} message(s) after the result")
    if len(sessions) > 1:
        reading.flag("session_id_inconsistent", f"{len(sessions)} session ids")
    return reading


def _take(reading: QwenReading, msg: dict[str, Any]) -> None:
    kind = msg.get("type")
    if kind not in KNOWN_TYPES:
        reading.flag("unknown_message_type", repr(kind))
    elif kind == "system" and msg.get("subtype") == "init":
        reading.init = msg
    elif kind == "result":
        if reading.result is not None:
            reading.flag("duplicate_result", "a second result message")
        reading.result = msg
    elif kind in ("assistant", "user"):
        content = (msg.get("message") or {}).get("content")
        blocks = content if isinstance(content, list) else []
        if kind == "assistant" and msg.get("parent_tool_use_id") is None:
            if _api_error(blocks):
                reading.api_errors.append(str(blocks[0].get("text"))[:300])
            else:
                reading.assistant_messages += 1
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                name = str(block.get("name"))
                reading.tool_calls[name] = reading.tool_calls.get(name, 0) + 1
            elif block.get("type") == "tool_result" and block.get("is_error"):
                reading.tool_errors += 1


def _api_error(blocks: list[Any]) -> bool:
    """qwen reports a failed model call as an assistant message of one text block
    ``[API Error: …]``: no answer of the model, so not counted as one."""
    return len(blocks) == 1 and isinstance(blocks[0], dict) and blocks[0].get("type") == "text" \
        and str(blocks[0].get("text", "")).startswith("[API Error:")


def usage_check(claim: dict[str, Any] | None, gateway: dict[str, Any] | None) -> dict[str, Any]:
    """The CLI's summed ``usage`` against the gateway's ledger. qwen counts prompt tokens with
    OpenAI's convention (cached tokens inside ``input_tokens``), the ledger keeps ``input`` the
    same way, so input and output must match exactly when both are known."""
    if not gateway:
        return {"comparable": False, "reason": "no gateway ledger for this attempt"}
    if not isinstance(claim, dict):
        return {"comparable": False, "reason": "the agent made no usage claim"}
    if gateway.get("usage_missing_calls"):
        return {"comparable": False, "reason": "the gateway lacks usage for some calls"}
    pairs = {"input": ("input_tokens", "input"), "output": ("output_tokens", "output")}
    diffs = {k: {"agent": claim.get(a), "gateway": gateway.get(g)}
             for k, (a, g) in pairs.items() if claim.get(a) != gateway.get(g)}
    return {"comparable": True, "agrees": not diffs, "differences": diffs}


__all__ = ["ANOMALIES", "EXIT_CODES", "QwenReading", "read_stream", "usage_check"]
