"""Reading ``codex exec --json`` stdout: the JSONL events of Codex CLI 0.171.0.

Pure functions over the bytes the CLI wrote, so a stream kept on disk reads the same later. The
shape (``shared/ref/agent-clis.md``, and seen when the pinned CLI was driven here):
``thread.started{thread_id}``, ``turn.started``, ``item.started`` / ``item.updated`` /
``item.completed`` with ``item{id, type}`` (``agent_message{text}``,
``command_execution{command, exit_code, status}``, ``reasoning``, ``file_change``, ``error``
for a warning such as unknown model metadata), a top-level ``error{message}`` for a failed
model call, and one ``turn.completed{usage}`` or ``turn.failed{error}`` per turn. The stream is
data: every way it breaks that shape is named (``ANOMALIES``), never repaired.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from assay.agents.cli_common import not_comparable, note_anomaly, parse_jsonl

ITEM_EVENTS = ("item.started", "item.updated", "item.completed")
TERMINAL = ("turn.completed", "turn.failed")
KNOWN_EVENTS = ("thread.started", "turn.started", *ITEM_EVENTS, *TERMINAL, "error")
USAGE_FIELDS = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens",
                "output_tokens", "reasoning_output_tokens")

#: every anomaly the reader can name, with what it means (docs/guide/agents.md lists the same names)
ANOMALIES = {
    "invalid_json_line": "a line before the last is not a JSON object",
    "truncated_last_line": "the last line has no newline or does not parse (the writer died)",
    "unknown_event_type": "an event type the pinned CLI does not emit",
    "missing_thread_started": "no thread.started before the first turn",
    "missing_terminal_event": "no turn.completed or turn.failed: a crash, kill or pre-turn "
                              "error; the exit code and stderr decide",
    "duplicate_terminal_event": "a turn ended twice (codex exec runs one turn)",
    "events_after_terminal": "events follow the turn's end",
    "item_not_completed": "an item started but never completed",
    "usage_disagrees_with_gateway": "the agent's usage claim disagrees with the gateway ledger",
}


@dataclass
class CodexReading:
    """What the stream says, and every way it broke the expected shape."""

    lines: int = 0
    events: int = 0
    anomalies: dict[str, int] = field(default_factory=dict)
    #: the first few concrete problems, for a reader (line numbers are 1-based)
    notes: list[str] = field(default_factory=list)
    event_counts: dict[str, int] = field(default_factory=dict)
    thread_id: str | None = None
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the ``turn.completed`` / ``turn.failed`` event that ended the run
    terminal: dict[str, Any] | None = None
    #: top-level ``error`` events (a failed model call), messages only
    errors: list[str] = field(default_factory=list)

    def flag(self, name: str, note: str) -> None:
        note_anomaly(self.anomalies, self.notes, ANOMALIES, name, note)

    @property
    def usage(self) -> dict[str, Any] | None:
        """The agent's own usage claim (from ``turn.completed``); None when it made none."""
        if self.terminal is None or self.terminal.get("type") != "turn.completed":
            return None
        usage = self.terminal.get("usage")
        return dict(usage) if isinstance(usage, dict) else None

    @property
    def failure(self) -> str | None:
        """The message of ``turn.failed``, as the CLI gave it."""
        if self.terminal is None or self.terminal.get("type") != "turn.failed":
            return None
        err = self.terminal.get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        return str(msg) if msg is not None else ""

    def to_record(self) -> dict[str, Any]:
        items = list(self.items.values())
        kinds: dict[str, int] = {}
        for it in items:
            kinds[str(it.get("type"))] = kinds.get(str(it.get("type")), 0) + 1
        final = next((it.get("text") for it in reversed(items)
                      if it.get("type") == "agent_message" and it.get("text")), None)
        return {"lines": self.lines, "events": self.events, "event_counts": self.event_counts,
                "thread_id": self.thread_id, "anomaly_notes": self.notes,
                "turns": self.event_counts.get("turn.started", 0),
                "terminal": self.terminal.get("type") if self.terminal else None,
                "failure": self.failure, "errors": self.errors[:10],
                # the CLI's own retries of a failed model call ("Reconnecting... n/5")
                "reconnects": sum(e.startswith("Reconnecting") for e in self.errors),
                "items": {"count": len(items), "by_type": kinds,
                          "tool_calls": [{"id": it.get("id"), "command": it.get("command"),
                                          "exit_code": it.get("exit_code"),
                                          "status": it.get("status")}
                                         for it in items
                                         if it.get("type") == "command_execution"],
                          "warnings": [str(it.get("message"))[:500] for it in items
                                       if it.get("type") == "error"],
                          "final_message": final[:2000] if isinstance(final, str) else None}}


def read_codex_stream(raw: bytes) -> CodexReading:
    """Merge one run's stdout into a reading; see the module docstring."""
    reading = CodexReading()
    events = parse_jsonl(raw, reading)
    reading.events = len(events)
    for n, ev in events:
        etype = ev.get("type")
        if not isinstance(etype, str):
            reading.flag("unknown_event_type", f"line {n}: no type")
            continue
        reading.event_counts[etype] = reading.event_counts.get(etype, 0) + 1
        if etype not in KNOWN_EVENTS:
            reading.flag("unknown_event_type", f"line {n}: type {etype!r}")
            continue
        if reading.terminal is not None and etype not in TERMINAL:
            reading.flag("events_after_terminal", f"line {n}: {etype} after the turn ended")
        if etype == "thread.started":
            reading.thread_id = ev.get("thread_id")
        elif etype == "turn.started" and reading.thread_id is None:
            reading.flag("missing_thread_started", f"line {n}: turn.started before a thread")
        elif etype in ITEM_EVENTS:
            item = ev.get("item")
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                cur = reading.items.setdefault(item["id"], {"completed": False})
                cur.update(item)  # every event carries the item's full current state
                cur["completed"] = cur["completed"] or etype == "item.completed"
        elif etype == "error":
            reading.errors.append(str(ev.get("message"))[:2000])
        elif etype in TERMINAL:
            if reading.terminal is not None:
                reading.flag("duplicate_terminal_event", f"line {n}: a second {etype}")
            else:
                reading.terminal = ev
    if reading.terminal is None:
        reading.flag("missing_terminal_event", "no turn.completed or turn.failed")
    for iid, it in reading.items.items():
        if not it["completed"]:
            reading.flag("item_not_completed", f"item {iid} ({it.get('type')}) never completed")
    return reading


def usage_check(claim: dict[str, Any] | None, gateway: dict[str, Any] | None) -> dict[str, Any]:
    """The agent's ``turn.completed`` usage against the gateway's ledger for the attempt.

    Codex sums the responses it kept over the turn, so on a finished turn both should count the
    same calls: output tokens must be equal, input tokens equal whether or not the agent counts
    cache reads inside ``input_tokens``. No claim, or a gateway with calls lacking usage, is not
    comparable (unknown stays unknown)."""
    if (unknown := not_comparable(claim, gateway)) is not None:
        return unknown
    assert claim is not None and gateway is not None  # not_comparable said so
    cin, cout = claim.get("input_tokens"), claim.get("output_tokens")
    cache = claim.get("cached_input_tokens") or 0
    if not isinstance(cin, int | float) or not isinstance(cout, int | float):
        return {"comparable": False, "reason": "the claim has no input/output tokens"}
    gin, gout = gateway.get("input"), gateway.get("output")
    in_ok = gin in (cin, cin + cache)
    return {"comparable": True, "agrees": bool(in_ok and cout == gout),
            "agent": {"input": cin, "cached_input": cache, "output": cout},
            "gateway": {"input": gin, "cached_input": gateway.get("cached_input"),
                        "output": gout, "calls": gateway.get("calls")}}
