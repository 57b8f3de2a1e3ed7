"""A streamed answer (SSE) put back into the shape of a plain answer of its API, for the
transcript (``gateway_transcript``), from the same bytes the agent received.

The upstream's stream is untrusted data, so every size here is bounded by the stream's own
bytes or by a constant, never by a number the upstream writes:

- text: at most ``MAX_RESPONSE_BYTES`` of event data is read (the answer is then reassembled
  from its start, with a note); each text field (content, a tool call's arguments, a block's
  ``partial_json``) is kept as a list of its pieces and joined once at the end, so the work is
  linear in the bytes, however small the pieces;
- indices: a chat ``choices[].index`` or ``tool_calls[].index`` and an Anthropic content
  block's ``index`` name a slot in a dict, never a position in a list the gateway would fill up
  to it. An index must be an integer (not a boolean) in ``0..MAX_STREAM_INDEX``, and one answer
  holds at most ``MAX_STREAM_ITEMS`` choices, tool calls and blocks in all. A piece that breaks
  either rule is a protocol anomaly: left out of the reassembled answer and described in the
  call's ``response_note`` (the first ``MAX_ANOMALIES``, then a count), the way a cut or
  eventless stream is. The agent still receives the stream as it came: what to make of it is
  part of what is tested.

Sparse indices within the bound are legal (a provider may number the tool calls 0 and 2): each
slot keeps its own index (``choices[].index`` and ``tool_calls[].index`` in the answer), and
slots are listed in index order, with nothing invented for the numbers skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from assay.models.gateway.transcript import MAX_RESPONSE_BYTES
from assay.models.gateway.wire import EventBuffer, Family
from assay.models.untrusted_json import parse_json

#: The highest index a streamed answer may give a choice, a tool call or a content block. No
#: real API comes near it (OpenAI caps ``n`` at 128 choices; a model's turn has a handful of
#: tool calls or blocks).
MAX_STREAM_INDEX = 1023
#: The most choices, tool calls and content blocks one reassembled answer holds, all counted.
MAX_STREAM_ITEMS = 4096
#: Anomalies described one by one in a call's note; the rest are counted.
MAX_ANOMALIES = 5
#: The chat delta fields that are text, concatenated across chunks.
_CHAT_TEXT = ("content", "reasoning_content", "reasoning", "refusal")
#: Anthropic delta fields that are text: (field in the delta, key in the block).
_BLOCK_TEXT = (("text", "text"), ("thinking", "thinking"), ("signature", "signature"))


@dataclass
class _ToolCall:
    index: int
    id: str | None = None
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)

    def plain(self) -> dict[str, Any]:
        return {"index": self.index, "id": self.id, "type": "function",
                "function": {"name": "".join(self.name), "arguments": "".join(self.arguments)}}


@dataclass
class _Choice:
    index: int
    finish_reason: str | None = None
    text: dict[str, list[str]] = field(default_factory=dict)
    calls: dict[int, _ToolCall] | None = None  # None: the stream never sent ``tool_calls``

    def plain(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant"}
        message.update({k: "".join(parts) for k, parts in self.text.items()})
        if self.calls is not None:
            message["tool_calls"] = [self.calls[i].plain() for i in sorted(self.calls)]
        return {"index": self.index, "message": message, "finish_reason": self.finish_reason}


@dataclass
class _Block:
    start: dict[str, Any]
    text: dict[str, list[str]] = field(default_factory=dict)
    partial_json: list[str] | None = None

    def plain(self) -> dict[str, Any]:
        block = dict(self.start)
        for key, parts in self.text.items():
            before = block.get(key)
            block[key] = (before if isinstance(before, str) else "") + "".join(parts)
        if self.partial_json is not None:
            text = "".join(self.partial_json)
            parsed = parse_json(text.encode("utf-8"))
            block["input"] = parsed if parsed is not None else text
        return block


def _shown(value: Any) -> str:
    """An upstream's value in a note: its JSON-ish form, at most 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class StreamCollector:
    """Reassembles a streamed answer (SSE) into the shape of a plain answer of its API, from
    the same bytes the agent received; holds at most ``MAX_RESPONSE_BYTES`` of event data and
    ``MAX_STREAM_ITEMS`` slots."""

    def __init__(self, family: Family) -> None:
        self.family = family
        self._events = EventBuffer()
        self.size = 0
        self.cut = False
        self.events = 0
        self.items = 0
        self.anomalies: list[str] = []
        self.anomaly_count = 0
        self.failed: str | None = None  # why the reassembly stopped, if it did
        # chat
        self._choices: dict[int, _Choice] = {}
        self._top: dict[str, Any] = {}
        # anthropic
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, _Block] = {}
        # responses
        self._final: Any = None
        self._text: list[str] = []

    def feed(self, piece: bytes) -> None:
        if self.cut:  # past the bound nothing more is read: the answer is its start
            return
        buf, spans = self._events.feed(piece)
        for begin, end, _ in spans:
            self._read(buf[begin:end])
            if self.cut:
                break
        if self.cut or self._events.size > MAX_RESPONSE_BYTES:
            self._events.flush()
            self.cut = True

    # ------------------------------------------------------------------ bounds

    def _anomaly(self, text: str) -> None:
        self.anomaly_count += 1
        if len(self.anomalies) < MAX_ANOMALIES:
            self.anomalies.append(f"event {self.events}: {text}")

    def _index(self, where: str, value: Any, default: int) -> int | None:
        """The slot ``value`` names (``default`` when the upstream named none), or None after
        noting why it names none: a boolean, a non-integer, or an integer out of bounds."""
        if value is None:
            if default > MAX_STREAM_INDEX:
                self._anomaly(f"{where} missing, and the next one would be past "
                              f"{MAX_STREAM_INDEX}: left out")
                return None
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self._anomaly(f"{where} {_shown(value)} is not an integer: left out")
            return None
        if not 0 <= value <= MAX_STREAM_INDEX:
            self._anomaly(f"{where} {_shown(value)} is outside 0..{MAX_STREAM_INDEX}: left out")
            return None
        return value

    def _room(self, where: str) -> bool:
        """Whether one more slot fits in the answer (counting it), else noted."""
        if self.items >= MAX_STREAM_ITEMS:
            self._anomaly(f"a new {where} past the answer's {MAX_STREAM_ITEMS} choices, tool "
                          f"calls and blocks: left out")
            return False
        self.items += 1
        return True

    # ------------------------------------------------------------------ events

    def _read(self, event: bytes) -> None:
        """One event into the answer. The answer is the transcript's, never the call's: a
        shape this reader did not foresee stops the reassembly with a note (``failed``), and
        neither the stream nor its ledger row ever depend on it."""
        try:
            self._event(event)
        except Exception as exc:  # any shape of upstream data: recorded in the note
            self.failed = f"{type(exc).__name__}: {str(exc)[:200]}"
            self.cut = True

    def _event(self, event: bytes) -> None:
        data = [line[5:].strip() for line in event.replace(b"\r\n", b"\n").split(b"\n")
                if line.startswith(b"data:")]
        if not data or data == [b"[DONE]"]:
            return
        self.size += sum(len(d) for d in data)
        if self.size > MAX_RESPONSE_BYTES:
            self.cut = True
            return
        payload = parse_json(b"\n".join(data))
        if not isinstance(payload, dict):
            return
        self.events += 1
        if self.family == "chat":
            self._chat_event(payload)
        elif self.family == "anthropic":
            self._anthropic_event(payload)
        else:
            self._responses_event(payload)

    def _chat_event(self, p: dict[str, Any]) -> None:
        for k in ("id", "model", "created", "usage", "system_fingerprint"):
            if p.get(k) is not None:
                self._top[k] = p[k]
        choices = p.get("choices")
        for ch in choices if isinstance(choices, list) else []:
            if not isinstance(ch, dict):
                continue
            idx = self._index("choices[].index", ch.get("index"), 0)
            if idx is None:
                continue
            slot = self._choices.get(idx)
            if slot is None:
                if not self._room("choice"):
                    continue
                slot = self._choices[idx] = _Choice(idx)
            if isinstance(ch.get("finish_reason"), str):
                slot.finish_reason = ch["finish_reason"]
            delta = ch.get("delta")
            if isinstance(delta, dict):
                self._chat_delta(slot, delta)

    def _chat_delta(self, slot: _Choice, delta: dict[str, Any]) -> None:
        for k in _CHAT_TEXT:
            if isinstance(delta.get(k), str):
                slot.text.setdefault(k, []).append(delta[k])
        calls = delta.get("tool_calls")
        for tc in calls if isinstance(calls, list) else []:
            if not isinstance(tc, dict):
                continue
            if slot.calls is None:
                slot.calls = {}
            # a provider that numbers no tool call starts a new one with each piece
            after = max(slot.calls) + 1 if tc.get("index") is None and slot.calls else 0
            i = self._index("tool_calls[].index", tc.get("index"), after)
            if i is None:
                continue
            cur = slot.calls.get(i)
            if cur is None:
                if not self._room("tool call"):
                    continue
                cur = slot.calls[i] = _ToolCall(i)
            if isinstance(tc.get("id"), str):
                cur.id = tc["id"]
            fn = tc.get("function")
            if isinstance(fn, dict):
                if isinstance(fn.get("name"), str):
                    cur.name.append(fn["name"])
                if isinstance(fn.get("arguments"), str):
                    cur.arguments.append(fn["arguments"])

    def _block(self, idx: int, start: dict[str, Any] | None) -> _Block | None:
        block = self._blocks.get(idx)
        if block is None:
            if not self._room("content block"):
                return None
            block = self._blocks[idx] = _Block(start or {"type": "text", "text": ""})
        elif start is not None:  # a block started again starts over
            block = self._blocks[idx] = _Block(start)
        return block

    def _anthropic_event(self, p: dict[str, Any]) -> None:
        kind = p.get("type")
        if kind == "message_start" and isinstance(p.get("message"), dict):
            self._message = dict(p["message"])
        elif kind == "content_block_start" and isinstance(p.get("content_block"), dict):
            after = max(self._blocks) + 1 if p.get("index") is None and self._blocks else 0
            idx = self._index("content_block_start.index", p.get("index"), after)
            if idx is not None:
                self._block(idx, dict(p["content_block"]))
        elif kind == "content_block_delta" and isinstance(p.get("delta"), dict):
            idx = self._index("content_block_delta.index", p.get("index"), 0)
            block = self._block(idx, None) if idx is not None else None
            if block is None:
                return
            d = p["delta"]
            for name, key in _BLOCK_TEXT:
                if isinstance(d.get(name), str):
                    block.text.setdefault(key, []).append(d[name])
            if isinstance(d.get("partial_json"), str):
                if block.partial_json is None:
                    block.partial_json = []
                block.partial_json.append(d["partial_json"])
        elif kind == "message_delta":
            msg = self._message if self._message is not None else {}
            self._message = msg
            if isinstance(p.get("delta"), dict):
                msg.update({k: v for k, v in p["delta"].items() if v is not None})
            if isinstance(p.get("usage"), dict):
                before = msg.get("usage")  # message_start's, whatever the upstream made it
                msg["usage"] = {**(before if isinstance(before, dict) else {}), **p["usage"]}

    def _responses_event(self, p: dict[str, Any]) -> None:
        kind = p.get("type")
        if kind in ("response.completed", "response.incomplete", "response.failed") \
                and isinstance(p.get("response"), dict):
            self._final = p["response"]
        elif kind == "response.output_text.delta" and isinstance(p.get("delta"), str):
            self._text.append(p["delta"])

    # ------------------------------------------------------------------ the answer

    def result(self) -> tuple[Any, str | None]:
        """(the reassembled answer, a note when it is partial, absent or anomalous)."""
        rest = self._events.flush()
        if rest.strip() and not self.cut:
            self._read(rest)
        notes = []
        if self.failed is not None:
            notes.append(f"reassembly stopped at event {self.events} ({self.failed}): the "
                         f"answer is what came before it")
        elif self.cut:
            notes.append(f"the stream was over {MAX_RESPONSE_BYTES} bytes: reassembled from "
                         f"its start")
        if self.anomaly_count:
            more = self.anomaly_count - len(self.anomalies)
            notes.append(f"{self.anomaly_count} protocol anomalies in the stream: "
                         + "; ".join(self.anomalies) + (f"; and {more} more" if more else ""))
        if self.events == 0:
            return None, "; ".join(notes) or "no events in the stream"
        out: dict[str, Any]
        if self.family == "chat":
            out = {**self._top, "object": "chat.completion",
                   "choices": [self._choices[i].plain() for i in sorted(self._choices)]}
        elif self.family == "anthropic":
            out = dict(self._message or {"type": "message", "role": "assistant"})
            out["content"] = [self._blocks[i].plain() for i in sorted(self._blocks)]
        elif self._final is not None:
            out = self._final
        else:
            out = {"object": "response", "output_text": "".join(self._text)}
            if not self.cut:
                notes.append("the stream ended before its response.completed event")
        return out, "; ".join(notes) or None
