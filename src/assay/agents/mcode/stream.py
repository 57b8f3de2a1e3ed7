"""Reading a MiniMax Code ``stream-json`` stdout as the headless contract describes it.

Pure functions over the bytes the CLI wrote, so the same reading applies to a live attempt and
to a stream kept on disk months ago. The stream is the agent's output: it is parsed as data,
every line that breaks the contract is named (``ANOMALIES``) rather than repaired, and a stream
that cannot be trusted (wrong ``schemaVersion``) is not interpreted at all: then the exit code
and stderr decide, as they do when ``exec.completed`` is missing.

Contract: ``shared/ref/mcode-headless.md`` (MiniMax-AI/minimax-code ``headless/contract.ts``
near commit 14053355). Base fields on every line; ``sequence`` from 1 without gaps or repeats;
one ``runId`` / ``sessionId`` / ``turnId`` per run, ``runId == "exec_" + turnId``; exactly one
``turn.completed`` or ``turn.failed``, immediately followed by ``exec.completed``, the last line.
Compaction is named in the contract only as a history message kind (``compaction*``, which
forces ``usageIncomplete``); an event whose type starts with ``compaction`` is counted, not
flagged, so ``trigger_event: compaction`` can find it in ``agent/stdout.log``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from assay.agents.cli_common import not_comparable, note_anomaly, parse_jsonl

SCHEMA_VERSION = 1
BASE_FIELDS = ("schemaVersion", "sequence", "timestampMs", "runId", "sessionId", "turnId",
               "type")
ITEM_EVENTS = ("item.started", "item.updated", "item.completed")
TERMINAL_TURN = ("turn.completed", "turn.failed")
KNOWN_EVENTS = ("exec.started", "session.started", "session.resumed", "turn.started",
                *ITEM_EVENTS, *TERMINAL_TURN, "exec.completed")
STATUSES = ("succeeded", "failed", "timeout", "cancelled", "limit_exceeded")
USAGE_FIELDS = ("totalTokens", "inputTokens", "outputTokens", "reasoningTokens",
                "cacheReadTokens", "cacheWriteTokens")

#: every anomaly the reader can name, with what it means (docs/guide/agents.md lists the same names)
ANOMALIES = {
    "invalid_json_line": "a line before the last is not a JSON object",
    "truncated_last_line": "the last line has no newline or does not parse (the writer died)",
    "missing_base_field": "an event lacks one of the contract's base fields",
    "schema_version_unsupported": "schemaVersion is not 1: the stream is not interpreted",
    "sequence_gap": "sequence skipped a number (or did not start at 1)",
    "sequence_repeated": "sequence repeated or went back",
    "run_id_inconsistent": "runId changed within the run, or is not exec_<turnId>",
    "session_id_inconsistent": "sessionId changed within the run",
    "turn_id_inconsistent": "turnId changed within the run",
    "unknown_event_type": "an event type the contract does not name",
    "duplicate_terminal_event": "more than one turn.completed/turn.failed or exec.completed",
    "exec_completed_not_last": "exec.completed is not the last line",
    "terminal_not_followed_by_exec_completed": "turn.completed/failed not directly followed "
                                               "by exec.completed",
    "missing_exec_completed": "no exec.completed: a pre-turn error, crash or kill; the exit "
                              "code and stderr decide",
    "result_inconsistent": "exec.completed's result disagrees with the stream (ids, status)",
    "exit_code_mismatch": "the exit code is not the one the contract gives the result",
    "usage_total_mismatch": "totalTokens is not inputTokens + outputTokens",
    "usage_complete_despite_compaction": "compaction seen but usageIncomplete is not true",
    "usage_disagrees_with_gateway": "the agent's usage claim disagrees with the gateway ledger",
}

#: ``MINIMAX_CODE_EXEC_EXIT_CODES``
EXIT_CODES = {0: "success", 2: "invocation_error", 3: "config_error", 4: "runtime_error",
              6: "timeout", 7: "limit_exceeded", 70: "internal_error", 130: "cancelled",
              141: "broken_pipe"}


def expected_exit_code(result: dict[str, Any]) -> int | None:
    """The exit code the contract gives a result: by status, a ``failed`` one by category."""
    status = result.get("status")
    if status == "failed":
        category = (result.get("error") or {}).get("category") if isinstance(
            result.get("error"), dict) else None
        return {"config": 3, "internal": 70}.get(str(category), 4)
    return {"succeeded": 0, "timeout": 6, "limit_exceeded": 7, "cancelled": 130}.get(
        str(status))


@dataclass
class StreamReading:
    """What the stream says, and every way it broke the contract."""

    events: int = 0
    lines: int = 0
    anomalies: dict[str, int] = field(default_factory=dict)
    #: the first few concrete problems, for a reader (line numbers are 1-based)
    notes: list[str] = field(default_factory=list)
    ids: dict[str, str | None] = field(default_factory=dict)
    event_counts: dict[str, int] = field(default_factory=dict)
    compaction_events: int = 0
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    turn: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    interpreted: bool = True

    def flag(self, name: str, note: str) -> None:
        note_anomaly(self.anomalies, self.notes, ANOMALIES, name, note)

    def to_record(self) -> dict[str, Any]:
        items = list(self.items.values())
        kinds: dict[str, int] = {}
        for it in items:
            kinds[str(it.get("type"))] = kinds.get(str(it.get("type")), 0) + 1
        final = next((it.get("content") for it in reversed(items)
                      if it.get("type") == "agent_message" and it.get("content")), None)
        return {"interpreted": self.interpreted, "lines": self.lines, "events": self.events,
                "event_counts": self.event_counts, "ids": self.ids,
                "anomalies": self.anomalies, "anomaly_notes": self.notes,
                "compaction_events": self.compaction_events,
                "items": {"count": len(items), "by_type": kinds,
                          "tool_calls": [{"id": it["id"], "name": (it.get("toolCall") or {})
                                          .get("name"), "status": (it.get("toolCall") or {})
                                          .get("status")}
                                         for it in items if it.get("type") == "tool_call"],
                          "final_message": final[:2000] if isinstance(final, str) else None}}


def _check_base(n: int, ev: dict[str, Any], reading: StreamReading,
                last_seq: int | None) -> int | None:
    missing = [f for f in BASE_FIELDS if f not in ev]
    if missing:
        reading.flag("missing_base_field", f"line {n}: missing {', '.join(missing)}")
    seq = ev.get("sequence")
    if isinstance(seq, int) and not isinstance(seq, bool):
        want = 1 if last_seq is None else last_seq + 1
        if seq > want:
            reading.flag("sequence_gap", f"line {n}: sequence {seq} after "
                                         f"{last_seq if last_seq is not None else 'start'}")
        elif seq < want:
            reading.flag("sequence_repeated", f"line {n}: sequence {seq} after {last_seq}")
        last_seq = seq if last_seq is None else max(seq, last_seq)
    for key, name in (("runId", "run_id_inconsistent"), ("sessionId", "session_id_inconsistent"),
                      ("turnId", "turn_id_inconsistent")):
        if key not in ev:
            continue
        if reading.ids.get(key) is None:
            reading.ids[key] = ev[key]
        elif ev[key] != reading.ids[key]:
            reading.flag(name, f"line {n}: {key} {ev[key]!r}, first {reading.ids[key]!r}")
    if "runId" in ev and "turnId" in ev and ev["runId"] != f"exec_{ev['turnId']}":
        reading.flag("run_id_inconsistent", f"line {n}: runId is not exec_<turnId>")
    return last_seq


def _merge_item(ev: dict[str, Any], reading: StreamReading) -> None:
    """Deltas concatenate; ``item.completed`` replaces with the authoritative content or tool
    snapshot; a later chunk for a completed id starts it again (a tool-status update)."""
    item = ev.get("item")
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        return
    iid = item["id"]
    cur = reading.items.get(iid)
    if cur is None or (cur.get("completed") and ev["type"] == "item.started"):
        cur = reading.items[iid] = {"id": iid, "type": item.get("type"), "content": "",
                                    "completed": False, "events": 0, **(
                                        {"toolCall": cur["toolCall"]} if cur and
                                        "toolCall" in cur else {})}
    cur["events"] += 1
    if isinstance(item.get("contentDelta"), str):
        cur["content"] += item["contentDelta"]
    if isinstance(item.get("toolCall"), dict):
        cur["toolCall"] = item["toolCall"]  # always a full snapshot: keep the latest
    if ev["type"] == "item.completed":
        cur["completed"] = True
        if isinstance(item.get("content"), str):
            cur["content"] = item["content"]


def read_stream(raw: bytes) -> StreamReading:
    """Validate and merge one run's stdout; see the module docstring."""
    reading = StreamReading()
    events = parse_jsonl(raw, reading, once=True)
    reading.events = len(events)
    if any(ev.get("schemaVersion") != SCHEMA_VERSION for _, ev in events):
        bad = sorted({repr(ev.get("schemaVersion")) for _, ev in events
                      if ev.get("schemaVersion") != SCHEMA_VERSION})
        reading.flag("schema_version_unsupported", f"schemaVersion {', '.join(bad)}")
        reading.interpreted = False
    last_seq: int | None = None
    terminal_turns = exec_done = 0
    for pos, (n, ev) in enumerate(events):
        last_seq = _check_base(n, ev, reading, last_seq)
        etype = ev.get("type")
        if not isinstance(etype, str):
            continue
        reading.event_counts[etype] = reading.event_counts.get(etype, 0) + 1
        if etype.startswith("compaction"):
            reading.compaction_events += 1
            continue
        if etype not in KNOWN_EVENTS:
            reading.flag("unknown_event_type", f"line {n}: type {etype!r}")
            continue
        if not reading.interpreted:
            continue
        nxt = events[pos + 1][1].get("type") if pos + 1 < len(events) else None
        if etype in ITEM_EVENTS:
            _merge_item(ev, reading)
        elif etype in TERMINAL_TURN:
            terminal_turns += 1
            if terminal_turns > 1:
                reading.flag("duplicate_terminal_event", f"line {n}: a second {etype}")
            else:
                reading.turn = ev
            if nxt != "exec.completed":
                reading.flag("terminal_not_followed_by_exec_completed",
                             f"line {n}: {etype} followed by {nxt!r}")
        elif etype == "exec.completed":
            exec_done += 1
            if exec_done > 1:
                reading.flag("duplicate_terminal_event", f"line {n}: a second exec.completed")
            elif isinstance(ev.get("result"), dict):
                reading.result = ev["result"]
            if pos + 1 < len(events):
                reading.flag("exec_completed_not_last", f"line {n}: events follow it")
    if reading.interpreted and reading.result is None:
        reading.flag("missing_exec_completed", "no exec.completed line")
    if reading.result is not None:
        _check_result(reading)
    return reading


def _check_result(reading: StreamReading) -> None:
    result = reading.result or {}
    for key in ("runId", "sessionId", "turnId"):
        if key in result and reading.ids.get(key) not in (None, result[key]):
            reading.flag("result_inconsistent", f"result {key} {result[key]!r}")
    status = result.get("status")
    if status not in STATUSES:
        reading.flag("result_inconsistent", f"result status {status!r}")
    elif reading.turn is not None:
        turn_status = ("succeeded" if reading.turn.get("type") == "turn.completed"
                       else reading.turn.get("status"))
        if turn_status != status:
            reading.flag("result_inconsistent", f"turn says {turn_status!r}, result {status!r}")
    usage = result.get("usage")
    if isinstance(usage, dict):
        i, o, t = usage.get("inputTokens"), usage.get("outputTokens"), usage.get("totalTokens")
        if all(isinstance(x, int | float) for x in (i, o, t)) and t != i + o:  # type: ignore[operator]
            reading.flag("usage_total_mismatch", f"totalTokens {t} != {i} + {o}")
    if reading.compaction_events and result.get("usageIncomplete") is not True:
        reading.flag("usage_complete_despite_compaction",
                     f"{reading.compaction_events} compaction event(s), usageIncomplete "
                     f"{result.get('usageIncomplete')!r}")


def usage_check(claim: dict[str, Any] | None, incomplete: Any,
                gateway: dict[str, Any] | None) -> dict[str, Any]:
    """The agent's ``usage`` against the gateway's ledger for the same attempt.

    The gateway saw every call; the agent sums the responses it kept. Whether the agent's
    ``inputTokens`` excludes cache reads is unconfirmed, so either convention agrees. A claim
    marked ``usageIncomplete`` is a lower bound: it disagrees only by claiming more than the
    gateway saw. A gateway with calls lacking usage, or no claim, is not comparable."""
    if (unknown := not_comparable(claim, gateway)) is not None:
        return unknown
    assert claim is not None and gateway is not None  # not_comparable said so
    gin, gout = gateway.get("input"), gateway.get("output")
    cin, cout = claim.get("inputTokens"), claim.get("outputTokens")
    cache = claim.get("cacheReadTokens") or 0
    if not isinstance(cin, int | float) or not isinstance(cout, int | float):
        return {"comparable": False, "reason": "the claim has no input/output tokens"}
    if not isinstance(gin, int | float) or not isinstance(gout, int | float):
        return {"comparable": False, "reason": "the gateway ledger has no token totals"}
    lower = incomplete is not False
    in_ok = (cin + cache <= gin if lower else cin in (gin, gin - cache) or cin + cache == gin)
    out_ok = cout <= gout if lower else cout == gout
    return {"comparable": True, "agrees": bool(in_ok and out_ok), "lower_bound": lower,
            "agent": {"input": cin, "cache_read": cache, "output": cout},
            "gateway": {"input": gin, "cached_input": gateway.get("cached_input"),
                        "output": gout, "calls": gateway.get("calls")}}
